/* plugins/cpu/quants.c — quantized types for the CPU plugin (filled in by the quantized-types work). */
#include "type_funcs.h"

const cpu_type_funcs *cpu_quant_funcs_get(int32_t type) {
    (void)type;
    return NULL;
}
