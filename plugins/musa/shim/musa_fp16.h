/* plugins/musa/shim/musa_fp16.h — TEST SHIM (see musa_runtime.h): MUSA's half type is __half. */
#ifndef PYG_MUSA_SHIM_FP16_H
#define PYG_MUSA_SHIM_FP16_H
#include <cuda_fp16.h>
#endif
