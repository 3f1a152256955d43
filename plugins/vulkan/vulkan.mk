# Builds libpyggml-vulkan.so (included by the top Makefile). Needs glslc and the Vulkan headers
# at build time only; the library dlopens libvulkan.so.1 at run time and links nothing of Vulkan.
# Without glslc or <vulkan/vulkan.h> this fragment adds nothing.
VK_GLSLC := $(shell command -v glslc 2>/dev/null)
VK_HAVE_HEADERS := $(shell $(CC) -E -x c -include vulkan/vulkan.h /dev/null >/dev/null 2>&1 && echo yes)

ifneq ($(VK_GLSLC),)
ifeq ($(VK_HAVE_HEADERS),yes)

VK_DIR := plugins/vulkan
VK_BUILD := build/vulkan
VK_LIB := $(PLUGIN_DIR)/libpyggml-vulkan.so
VK_SRCS := $(wildcard $(VK_DIR)/*.c)
VK_SHADERS := $(wildcard $(VK_DIR)/shaders/*.comp)
# the shaders' includes: every build depends on all of them
VK_GLSL := $(wildcard $(VK_DIR)/shaders/*.glsl)
# mul_mat_vec_rp.comp for q4_0 with 1 or 2 blocks per invocation as literals (option rp_lit; rules below)
RP_LIT_BUILDS := $(foreach j,1 2,mul_mat_vec_rp_q0j$(j) mul_mat_vec_rp4_q0j$(j) mul_mat_vec_rpe_q0j$(j) mul_mat_vec_rpe4_q0j$(j) mul_mat_vec_rpg_q0j$(j))
# mul_mat_cm4's KHR build with its specialization and workgroup size as literals, then spirv-opt -O (option gemm_lit), for the auto
# configurations on a 32-wide subgroup with gemm_b16 and cm_acc=f16x4: name:specialization:invocations. w2x2 is
# 64x128.k64.w2x2 (one stage where shared memory is NVIDIA's 48 KiB), w2x4 64x128.k64.w2x4.s1; q0 q4_0 weights read
# directly, dq gemm_dq's f16 copy (the k-quants). tests/test_vulkan_gemm_lit.py recomputes the values from vk_matmul.c's rules.
# (Literal builds with cm_acc=f32 ran as slowly as the specialized one on the H100: 27 TFLOPS, bench/results/
# gpu-vulkan-f32sums-h100-20261207T0610/; not kept.)
CM4_LITS := w2x2_q0:0x1284b902:128 w2x4_q0:0x12853902:256 w2x2_dq:0x1384b901:128 w2x4_dq:0x13853901:256
CM4_LIT_H := $(foreach l,$(CM4_LITS),$(VK_BUILD)/mul_mat_cm4_khr_$(word 1,$(subst :, ,$(l))).spv.h)
VK_SPV_H := $(patsubst $(VK_DIR)/shaders/%.comp,$(VK_BUILD)/%.spv.h,$(VK_SHADERS)) $(VK_BUILD)/mul_mat_cm_emu.spv.h \
            $(VK_BUILD)/mul_mat_cm128.spv.h $(VK_BUILD)/mul_mat_cm128_emu.spv.h \
            $(VK_BUILD)/mul_mat_cm2.spv.h $(VK_BUILD)/mul_mat_cm2_emu.spv.h $(VK_BUILD)/mul_mat_cm2_128.spv.h \
            $(VK_BUILD)/mul_mat_cm2_128_emu.spv.h $(VK_BUILD)/flash_attn_cm_emu.spv.h $(VK_BUILD)/norm_mul_add.spv.h $(VK_BUILD)/norm_mul_wg_add.spv.h \
            $(VK_BUILD)/norm_mul_reg_add.spv.h $(VK_BUILD)/mul_mat_cm3_emu.spv.h $(VK_BUILD)/mul_mat_cm3_128.spv.h \
            $(VK_BUILD)/mul_mat_cm3_128_emu.spv.h $(VK_BUILD)/flash_attn2.spv.h $(VK_BUILD)/mul_mat_vec3p.spv.h \
            $(VK_BUILD)/rope_store.spv.h $(VK_BUILD)/mul_mat_vec3g.spv.h $(VK_BUILD)/mul_mat_vec3i.spv.h $(VK_BUILD)/mul_mat_vec3w.spv.h $(VK_BUILD)/mul_mat_vec3s.spv.h $(VK_BUILD)/mul_mat_vec3n.spv.h \
            $(VK_BUILD)/mul_mat_cm4_emu.spv.h $(VK_BUILD)/mul_mat_cm4_khr.spv.h $(VK_BUILD)/flash_attn_cm2_emu.spv.h \
            $(VK_BUILD)/norm_mul_reg_q8.spv.h $(VK_BUILD)/norm_mul_reg_add_q8.spv.h $(VK_BUILD)/mul_mat_vec3q.spv.h \
            $(VK_BUILD)/mul_mat_vec_rpg.spv.h $(VK_BUILD)/mul_mat_vec_rpe.spv.h $(VK_BUILD)/mul_mat_vec_rpn.spv.h \
            $(VK_BUILD)/mul_mat_vec_rpg_nw.spv.h $(VK_BUILD)/mul_mat_vec_rpe_nw.spv.h $(VK_BUILD)/mul_mat_vec_rpn_nw.spv.h \
            $(VK_BUILD)/mul_mat_vec_rp4.spv.h $(VK_BUILD)/mul_mat_vec_rpe4.spv.h \
            $(foreach b,$(RP_LIT_BUILDS),$(VK_BUILD)/$(b).spv.h) $(VK_BUILD)/cm4_lit.h $(VK_BUILD)/flash_attn_dec2_d128g1.spv.h $(CM4_LIT_H) \
            $(VK_BUILD)/swiglu8_b16.spv.h $(VK_BUILD)/flash_attn_cm2s.spv.h $(VK_BUILD)/flash_attn_cm2s_emu.spv.h \
            $(VK_BUILD)/norm_mul_reg_b16.spv.h $(VK_BUILD)/norm_mul_reg_add_b16.spv.h $(VK_BUILD)/flash_attn_cm3_emu.spv.h
VK_CFLAGS := $(PLUGIN_CFLAGS) -std=gnu11 -O2 -I$(VK_DIR) -I$(VK_BUILD)

$(VK_BUILD)/%.spv.h: $(VK_DIR)/shaders/%.comp $(VK_GLSL)
	@mkdir -p $(VK_BUILD)
	$(VK_GLSLC) --target-env=vulkan1.2 -O -mfmt=c -o $@ $<

# the cooperative-matrix shaders with their matrix primitives in plain GLSL (options gemm / fa = cm_emulated: tests)
$(VK_BUILD)/%_emu.spv.h: $(VK_DIR)/shaders/%.comp $(VK_GLSL)
	@mkdir -p $(VK_BUILD)
	$(VK_GLSLC) --target-env=vulkan1.2 -O -DCM_EMULATE -mfmt=c -o $@ $<

# builds of one shader with glslc defines: name, source (under shaders/), defines
define VK_VARIANT_RULE
$(VK_BUILD)/$(1).spv.h: $(VK_DIR)/shaders/$(2) $(VK_GLSL)
	@mkdir -p $(VK_BUILD)
	$(VK_GLSLC) --target-env=vulkan1.2 -O $(3) -mfmt=c -o $$@ $$<
endef
# the swiglu that also writes the down projection's f16 activations (option swiglu8=2)
$(eval $(call VK_VARIANT_RULE,swiglu8_b16,swiglu8.comp,-DB16))
# the prefill flash attention over KV splits, their partials merged by flash_attn.comp (option fa_cm_wgs)
$(eval $(call VK_VARIANT_RULE,flash_attn_cm2s,flash_attn_cm2.comp,-DFA_SPLIT))
$(eval $(call VK_VARIANT_RULE,flash_attn_cm2s_emu,flash_attn_cm2.comp,-DFA_SPLIT -DCM_EMULATE))
# the cooperative-matrix GEMM with 128x128 tiles (option gemm_tile)
$(eval $(call VK_VARIANT_RULE,mul_mat_cm128,mul_mat_cm.comp,-DCM_TILE=128))
$(eval $(call VK_VARIANT_RULE,mul_mat_cm128_emu,mul_mat_cm.comp,-DCM_TILE=128 -DCM_EMULATE))
# the pipelined cooperative-matrix GEMM (option gemm_v=2)
$(eval $(call VK_VARIANT_RULE,mul_mat_cm2,mul_mat_cm.comp,-DCM_PIPE))
$(eval $(call VK_VARIANT_RULE,mul_mat_cm2_emu,mul_mat_cm.comp,-DCM_PIPE -DCM_EMULATE))
$(eval $(call VK_VARIANT_RULE,mul_mat_cm2_128,mul_mat_cm.comp,-DCM_PIPE -DCM_TILE=128))
$(eval $(call VK_VARIANT_RULE,mul_mat_cm2_128_emu,mul_mat_cm.comp,-DCM_PIPE -DCM_TILE=128 -DCM_EMULATE))
# mul_mat_cm3.comp with 128x128 tiles (gemm_v=3 gemm_tile=128; the 64-tile builds use the pattern rules)
$(eval $(call VK_VARIANT_RULE,mul_mat_cm3_128,mul_mat_cm3.comp,-DCM_TILE=128))
$(eval $(call VK_VARIANT_RULE,mul_mat_cm3_128_emu,mul_mat_cm3.comp,-DCM_TILE=128 -DCM_EMULATE))
# mul_mat_vec3.comp with the next chunk's weights loaded ahead (option matvec=4)
$(eval $(call VK_VARIANT_RULE,mul_mat_vec3p,mul_mat_vec3.comp,-DMV_PIPE))
# mul_mat_vec3.comp on int8 activations with the integer dot product (option matvec=5)
$(eval $(call VK_VARIANT_RULE,mul_mat_vec3i,mul_mat_vec3.comp,-DMV_INT8))
# the same with the whole activation row staged once and no barrier in the loop (option matvec=6)
$(eval $(call VK_VARIANT_RULE,mul_mat_vec3w,mul_mat_vec3.comp,-DMV_INT8 -DMV_WHOLE))
# the same reading silu(gate) * up as its activations, the product written too (option fuse_swiglu)
$(eval $(call VK_VARIANT_RULE,mul_mat_vec3s,mul_mat_vec3.comp,-DMV_INT8 -DMV_WHOLE -DMV_SWIGLU))
# the same recomputing a fused norm's result from its inputs (option fuse_norm_mv)
$(eval $(call VK_VARIANT_RULE,mul_mat_vec3n,mul_mat_vec3.comp,-DMV_INT8 -DMV_WHOLE -DMV_NORM))
# the same reading the fused norm's int8 copy of its result (option mv_q8), and the norms writing it
$(eval $(call VK_VARIANT_RULE,mul_mat_vec3q,mul_mat_vec3.comp,-DMV_INT8 -DMV_WHOLE -DMV_PREQ))
$(eval $(call VK_VARIANT_RULE,norm_mul_reg_q8,norm_mul_reg.comp,-DQ8_OUT))
$(eval $(call VK_VARIANT_RULE,norm_mul_reg_add_q8,norm_mul_reg.comp,-DFUSED_ADD -DQ8_OUT))
# the prefill norms that also write the next GEMMs' f16 activations (option norm_b16)
$(eval $(call VK_VARIANT_RULE,norm_mul_reg_b16,norm_mul_reg.comp,-DB16_OUT))
$(eval $(call VK_VARIANT_RULE,norm_mul_reg_add_b16,norm_mul_reg.comp,-DFUSED_ADD -DB16_OUT))
# the repacked mat-vec for a gate and an up weight and their swiglu (option matvec_rp)
$(eval $(call VK_VARIANT_RULE,mul_mat_vec_rpg,mul_mat_vec_rp.comp,-DRP_GLU))
# the same for one weight, with the rope and/or the KV-cache write of its result (option fuse_rope_mv)
$(eval $(call VK_VARIANT_RULE,mul_mat_vec_rpe,mul_mat_vec_rp.comp,-DRP_EPI))
# the plain and the rope/store builds with 4 rows per workgroup (option rp_rows=4)
$(eval $(call VK_VARIANT_RULE,mul_mat_vec_rp4,mul_mat_vec_rp.comp,-DRP_ROWS=4u))
$(eval $(call VK_VARIANT_RULE,mul_mat_vec_rpe4,mul_mat_vec_rp.comp,-DRP_EPI -DRP_ROWS=4u))
# q4_0 with 1 or 2 blocks per invocation as literals (option rp_lit): plain, 4-row, rope/store, its 4-row and gate/up
$(foreach j,1 2,$(eval $(call VK_VARIANT_RULE,mul_mat_vec_rp_q0j$(j),mul_mat_vec_rp.comp,-DRP_LIT=$(j)u)))
$(foreach j,1 2,$(eval $(call VK_VARIANT_RULE,mul_mat_vec_rp4_q0j$(j),mul_mat_vec_rp.comp,-DRP_LIT=$(j)u -DRP_ROWS=4u)))
$(foreach j,1 2,$(eval $(call VK_VARIANT_RULE,mul_mat_vec_rpe_q0j$(j),mul_mat_vec_rp.comp,-DRP_LIT=$(j)u -DRP_EPI)))
$(foreach j,1 2,$(eval $(call VK_VARIANT_RULE,mul_mat_vec_rpe4_q0j$(j),mul_mat_vec_rp.comp,-DRP_LIT=$(j)u -DRP_EPI -DRP_ROWS=4u)))
$(foreach j,1 2,$(eval $(call VK_VARIANT_RULE,mul_mat_vec_rpg_q0j$(j),mul_mat_vec_rp.comp,-DRP_LIT=$(j)u -DRP_GLU)))
# the same writing the next rms_norm's int8 input and squares for its readers (option fold_norm)
$(eval $(call VK_VARIANT_RULE,mul_mat_vec_rpn,mul_mat_vec_rp.comp,-DRP_NORM))
# the three writing the add + norm's nodes instead of its dispatch (option fold_nodes: specialization bit 17)
$(eval $(call VK_VARIANT_RULE,mul_mat_vec_rpn_nw,mul_mat_vec_rp.comp,-DRP_NORM -DRP_NWR))
$(eval $(call VK_VARIANT_RULE,mul_mat_vec_rpe_nw,mul_mat_vec_rp.comp,-DRP_EPI -DRP_NWR))
$(eval $(call VK_VARIANT_RULE,mul_mat_vec_rpg_nw,mul_mat_vec_rp.comp,-DRP_GLU -DRP_NWR))
# mul_mat_vec3.comp for two weights and their swiglu (option fuse_glu=1)
$(eval $(call VK_VARIANT_RULE,mul_mat_vec3g,mul_mat_vec3.comp,-DMV_GLU))
# rope.comp writing its result's cache rows too (option fuse_rope=1)
$(eval $(call VK_VARIANT_RULE,rope_store,rope.comp,-DROPE_STORE))
# flash_attn_dec2.comp with D = 128, one query head per KV head, 4 rows in flight and 32-wide subgroups as literals
# (option fa_lit)
$(eval $(call VK_VARIANT_RULE,flash_attn_dec2_d128g1,flash_attn_dec2.comp,-DFA2_LIT=0x200401u -DFA2_D=128u))
# flash_attn.comp's FA_V2 build (option fa_v=2)
$(eval $(call VK_VARIANT_RULE,flash_attn2,flash_attn.comp,-DFA_V2))

# the cooperative-matrix shaders on GL_KHR_cooperative_matrix (coopmat.glsl's CM_KHR): preprocessed by
# glslc, compiled by glslang 13 from PyPI (scripts/glslang_khr.py; without it a placeholder, and the
# plugin runs the NV builds). After deps: the package comes with requirements.txt.
$(VK_BUILD)/%_khr.spv.h: $(VK_DIR)/shaders/%.comp $(VK_GLSL) scripts/glslang_khr.py | deps
	@mkdir -p $(VK_BUILD)
	$(VK_GLSLC) -E -DCM_KHR -o $(VK_BUILD)/$*_khr.pp.comp $<
	$(PYTHON) scripts/glslang_khr.py $(VK_BUILD)/$*_khr.pp.comp $@

# (CM4_LITS, at the top: the rules for its builds)
define CM4_LIT_RULE
$(VK_BUILD)/mul_mat_cm4_khr_$(1).spv.h: $(VK_DIR)/shaders/mul_mat_cm4.comp $(VK_GLSL) scripts/glslang_khr.py | deps
	@mkdir -p $(VK_BUILD)
	$(VK_GLSLC) -E -DCM_KHR -DCM4_LIT=$(2)u -DCM4_WG=$(3) -o $(VK_BUILD)/mul_mat_cm4_khr_$(1).pp.comp $$<
	$(PYTHON) scripts/glslang_khr.py --opt $(VK_BUILD)/mul_mat_cm4_khr_$(1).pp.comp $$@
endef
$(foreach l,$(CM4_LITS),$(eval $(call CM4_LIT_RULE,$(word 1,$(subst :, ,$(l))),$(word 2,$(subst :, ,$(l))),$(word 3,$(subst :, ,$(l))))))
# their table for vk_shaders.c: the modules and, per entry, its specialization, invocations and module
$(VK_BUILD)/cm4_lit.h: $(VK_DIR)/vulkan.mk
	@mkdir -p $(VK_BUILD)
	@{ echo '/* generated by vulkan.mk from CM4_LITS */'; \
	  for l in $(CM4_LITS); do n=$${l%%:*}; echo "VKP_SPV(mul_mat_cm4_khr_$$n)"; echo "#include \"mul_mat_cm4_khr_$$n.spv.h\""; echo ';'; done; \
	  echo 'static const vkp_cm4_lit vkp_cm4_lits[] = {'; \
	  for l in $(CM4_LITS); do n=$${l%%:*}; r=$${l#*:}; echo "    { $${r%%:*}u, $${r#*:}u, spv_mul_mat_cm4_khr_$$n, sizeof spv_mul_mat_cm4_khr_$$n },"; done; \
	  echo '};'; } > $@

# the layer norms with the residual add before them folded in (norm_add.glsl)
$(VK_BUILD)/%_add.spv.h: $(VK_DIR)/shaders/%.comp $(VK_GLSL)
	@mkdir -p $(VK_BUILD)
	$(VK_GLSLC) --target-env=vulkan1.2 -O -DFUSED_ADD -mfmt=c -o $@ $<

$(VK_LIB): $(VK_SRCS) $(wildcard $(VK_DIR)/*.h) $(VK_SPV_H) $(PYG_HEADERS) plugins/plugin.map
	@mkdir -p $(PLUGIN_DIR)
	$(CC) $(VK_CFLAGS) -shared -o $@ $(VK_SRCS) $(PLUGIN_LDFLAGS) -ldl -lpthread -lm

PLUGINS += $(VK_LIB)

# scripts/vk_cm_probe: the tensor cores' rate through VK_KHR_cooperative_matrix per operand type and accumulator
# layout (not part of `all`; VK_CM_PROBE_V: the shader's variants, as many as vk_cm_probe.c's VARIANTS)
$(VK_BUILD)/vk_cm_probe_%.spv.h: scripts/vk_cm_probe.comp scripts/glslang_khr.py | deps
	@mkdir -p $(VK_BUILD)
	$(VK_GLSLC) -E -DV=$* -o $(VK_BUILD)/vk_cm_probe_$*.pp.comp $<
	$(PYTHON) scripts/glslang_khr.py $(VK_BUILD)/vk_cm_probe_$*.pp.comp $@
VK_CM_PROBE_V := 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16
$(VK_BUILD)/vk_cm_probe_spv.h: $(foreach v,$(VK_CM_PROBE_V),$(VK_BUILD)/vk_cm_probe_$(v).spv.h)
	@{ for v in $(VK_CM_PROBE_V); do echo "static const uint32_t probe_spv$$v[] ="; echo "#include \"vk_cm_probe_$$v.spv.h\""; echo ';'; done; \
	  echo 'static const uint32_t *const probe_spv[] = {'; for v in $(VK_CM_PROBE_V); do echo "probe_spv$$v,"; done; echo '};'; \
	  echo 'static const size_t probe_spv_size[] = {'; for v in $(VK_CM_PROBE_V); do echo "sizeof probe_spv$$v,"; done; echo '};'; } > $@
build/vk_cm_probe: scripts/vk_cm_probe.c $(VK_DIR)/vk_khr_cm.h $(VK_BUILD)/vk_cm_probe_spv.h
	$(CC) -std=gnu11 -O2 -Wall -Wextra -I$(VK_DIR) -I$(VK_BUILD) -o $@ $< -ldl -lm

endif
endif
