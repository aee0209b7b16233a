print("sttctl")
