// The rotation of one rope pair, as ggml defines it (YaRN included), shared by rope.comp and the mat-vec
// that ropes its own result (mul_mat_vec_rpe): (cos, sin) of the pair's angle, both scaled by the
// magnitude factor. i0 = the pair's even dimension index, log2_base = log2(freq_base), lo / hi = the
// YaRN correction dims (vk_graph.c computes them), ff = the pair's frequency factor (1 without one).
// Rope's operator parameters at words 80..: n_dims 0, freq_scale 4, ext_factor 5, attn_factor 6.
vec2 rope_cs(float pos, uint i0, float log2_base, float lo, float hi, float ff) {
    uint n_dims = uint(op_i(0u));
    float freq_scale = op_f(4u), ext_factor = op_f(5u), mscale = op_f(6u);
    float theta_extrap = pos * exp2(-float(i0) / float(n_dims) * log2_base) / ff;
    float theta_interp = freq_scale * theta_extrap;
    float theta = theta_interp;
    if (ext_factor != 0.0) {
        float y = (float(i0) / 2.0 - lo) / max(0.001, hi - lo);
        float ramp = (1.0 - min(1.0, max(0.0, y))) * ext_factor;
        theta = theta_interp * (1.0 - ramp) + theta_extrap * ramp;
        mscale *= 1.0 + 0.1 * log(1.0 / freq_scale);
    }
    return vec2(cos(theta) * mscale, sin(theta) * mscale);
}
