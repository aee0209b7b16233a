#pragma once
#include <dbus/dbus.h>
