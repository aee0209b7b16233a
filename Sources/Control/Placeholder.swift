// placeholder until sttctl lands
