#pragma once
#include <pocketsphinx.h>
#include <sphinxbase/err.h>
