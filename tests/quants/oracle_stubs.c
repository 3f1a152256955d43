/* tests/quants/oracle_stubs.c — the four ggml.c symbols that ggml-quants.c references, so that
 * ggml's reference quantizers can be built alone as a test oracle (build_oracle.sh). None of
 * them is reached by the quantize_row_*_ref functions the tests call. */
#include <stdlib.h>
#include <stddef.h>
#include <stdint.h>
void ggml_abort(const char *file, int line, const char *fmt, ...) { abort(); }
size_t ggml_row_size(int type, int64_t ne) { abort(); }
const char *ggml_type_name(int type) { return "?"; }
size_t ggml_type_size(int type) { abort(); }
