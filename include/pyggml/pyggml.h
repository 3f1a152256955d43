/* pyggml/pyggml.h — everything a plugin author needs, in one include. */
#ifndef PYGGML_PYGGML_H
#define PYGGML_PYGGML_H
#include "pyggml/types.h"
#include "pyggml/ops.h"
#include "pyggml/tensor.h"
#include "pyggml/plugin.h"
#endif
