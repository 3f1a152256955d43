/* plugins/musa/shim/musa_bf16.h — TEST SHIM (see musa_runtime.h): MUSA's bfloat16 is __mt_bfloat16. */
#ifndef PYG_MUSA_SHIM_BF16_H
#define PYG_MUSA_SHIM_BF16_H
#include <cuda_bf16.h>
typedef __nv_bfloat16 __mt_bfloat16;
#endif
