/* plugins/cuda/test/fattn_dec_host.cpp — the decode flash-attention kernel (flash_attn_dec.cu) run
 * through the host emulation of vendor_emu.h (force-included: -include test/vendor_emu.h), against a double-precision reference, on a machine
 * without a GPU (tests/test_cuda_fattn_dec.py builds and drives it):
 *
 *   fattn_dec_host D G H_kv n_q B n_kv n_ctx MASK SPARSE N_SM [softcap] [max_bias] [quant] [mask_f32]
 *
 * MASK: none | prefix:P (cells < P, causal over the query rows) | holes:F (a fraction F of the cells
 * masked at random, the rest random finite values, cell 0 kept) | empty (row 0 sees nothing).
 * K/V cells a mask hides hold NaN, so reading one shows. The node is the model's: K/V views of an
 * (n_ctx, H_kv * D) f16 cache, q a permuted (B, n_q, H, D) tensor, a contiguous output. Each case
 * runs twice (the block counters must be back at zero, the output the same); with quant, the int8
 * activations must be the output's quantization. Prints the NMSE and "ok"; exit 0 when it passed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <random>
#include <vector>
#include "flash_attn_dec.cu"
#include "options.cu"

int flash_attn_supports(const pyg_tensor *) { return 1; } /* the cases are valid nodes */
int check_launch(op_ctx *, const char *) { return PYG_OK; }

static uint16_t f2h(float f) { return gpu_float2half(f); }

static double alibi(float max_bias, int h, int n_head) {
    if (max_bias <= 0.0f) return 1.0;
    int n_log2 = 1;
    while (n_log2 * 2 <= n_head) n_log2 *= 2;
    const double m0 = pow(2.0, -max_bias / n_log2), m1 = pow(2.0, -(max_bias / 2.0) / n_log2);
    return h < n_log2 ? pow(m0, h + 1) : pow(m1, 2 * (h - n_log2) + 1);
}

int main(int argc, char **argv) {
    if (argc < 11) {
        fprintf(stderr, "usage: %s D G H_kv n_q B n_kv n_ctx MASK SPARSE N_SM [softcap] [max_bias] [quant] [mask_f32]\n",
                argv[0]);
        return 2;
    }
    const int D = atoi(argv[1]), G = atoi(argv[2]), Hkv = atoi(argv[3]), nq = atoi(argv[4]), B = atoi(argv[5]);
    const int n_kv = atoi(argv[6]), n_ctx = atoi(argv[7]);
    const char *mask_spec = argv[8];
    const int sparse = atoi(argv[9]), n_sm = atoi(argv[10]);
    const float softcap = argc > 11 ? (float)atof(argv[11]) : 0.0f, max_bias = argc > 12 ? (float)atof(argv[12]) : 0.0f;
    const int quant = argc > 13 ? atoi(argv[13]) : 0, mask_f32 = argc > 14 ? atoi(argv[14]) : 0;
    const int H = G * Hkv, kvd = Hkv * D;
    std::mt19937 rng(1234 + D + 7 * G + 13 * n_kv);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ud(0.0f, 1.0f);

    /* mask [n_kv, nq_pad, 1, B]: 0 / finite values where visible, -inf elsewhere */
    const int nq_pad = (nq + 7) / 8 * 8;
    const int has_mask = strcmp(mask_spec, "none") != 0;
    std::vector<float> mk((size_t)B * nq_pad * n_kv, 0.0f);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < nq_pad; i++)
            for (int j = 0; j < n_kv; j++) {
                float &x = mk[((size_t)b * nq_pad + i) * n_kv + j];
                if (!strncmp(mask_spec, "prefix:", 7)) x = j < atoi(mask_spec + 7) + i ? 0.0f : -INFINITY;
                else if (!strncmp(mask_spec, "holes:", 6)) x = (j > 0 && ud(rng) < atof(mask_spec + 6)) ? -INFINITY : -ud(rng);
                else if (!strcmp(mask_spec, "empty")) x = i == 0 ? -INFINITY : 0.0f;
            }
    /* the cache (n_ctx, kvd) per batch; hidden cells of every row hold NaN */
    std::vector<uint16_t> kc((size_t)B * n_ctx * kvd), vc((size_t)B * n_ctx * kvd);
    std::vector<double> kd(kc.size()), vdd(vc.size());
    for (size_t i = 0; i < kc.size(); i++) {
        const float a = nd(rng), c = nd(rng);
        kc[i] = f2h(a);
        vc[i] = f2h(c);
        kd[i] = f16_bits_to_f32(kc[i]);
        vdd[i] = f16_bits_to_f32(vc[i]);
    }
    for (int b = 0; b < B; b++)
        for (int j = 0; j < n_ctx; j++) {
            bool seen = j < n_kv && !has_mask;
            for (int i = 0; i < nq && has_mask && j < n_kv; i++) seen |= mk[((size_t)b * nq_pad + i) * n_kv + j] != -INFINITY;
            if (!seen)
                for (int e = 0; e < kvd; e++) kc[((size_t)b * n_ctx + j) * kvd + e] = vc[((size_t)b * n_ctx + j) * kvd + e] = 0x7e00;
        }
    std::vector<float> qv((size_t)B * nq * H * D); /* (B, n_q, H, D) */
    for (auto &x : qv) x = nd(rng);
    std::vector<uint16_t> mh(mk.size());
    for (size_t i = 0; i < mk.size(); i++) mh[i] = f2h(mk[i]);
    std::vector<float> dst((size_t)B * nq * H * D, 12345.0f);

    pyg_tensor tq, tk, tv, tm, tn;
    memset(&tq, 0, sizeof tq);
    tk = tv = tm = tn = tq;
    const int64_t qne[4] = {D, nq, H, B}, qnb[4] = {4, (int64_t)H * D * 4, (int64_t)D * 4, (int64_t)nq * H * D * 4};
    const int64_t kne[4] = {D, n_kv, Hkv, B}, knb[4] = {2, (int64_t)kvd * 2, (int64_t)D * 2, (int64_t)n_ctx * kvd * 2};
    const int64_t mne[4] = {n_kv, nq_pad, 1, B};
    const int64_t es = mask_f32 ? 4 : 2;
    const int64_t mnb[4] = {es, n_kv * es, (int64_t)nq_pad * n_kv * es, (int64_t)nq_pad * n_kv * es};
    const int64_t dne[4] = {D, H, nq, B}, dnb[4] = {4, (int64_t)D * 4, (int64_t)H * D * 4, (int64_t)nq * H * D * 4};
    for (int i = 0; i < 4; i++) {
        tq.ne[i] = qne[i]; tq.nb[i] = qnb[i];
        tk.ne[i] = tv.ne[i] = kne[i]; tk.nb[i] = tv.nb[i] = knb[i];
        tm.ne[i] = mne[i]; tm.nb[i] = mnb[i];
        tn.ne[i] = dne[i]; tn.nb[i] = dnb[i];
    }
    tq.type = PYG_TYPE_F32; tk.type = tv.type = PYG_TYPE_F16; tn.type = PYG_TYPE_F32;
    tm.type = mask_f32 ? PYG_TYPE_F32 : PYG_TYPE_F16;
    tq.data = qv.data(); tk.data = kc.data(); tv.data = vc.data(); tn.data = dst.data();
    tm.data = mask_f32 ? (void *)mk.data() : (void *)mh.data();
    tn.op = PYG_OP_FLASH_ATTN_EXT;
    tn.src[0] = &tq; tn.src[1] = &tk; tn.src[2] = &tv; tn.src[3] = has_mask ? &tm : NULL;
    const float scale = 1.0f / sqrtf((float)D);
    memcpy(&tn.op_params[0], &scale, 4);
    memcpy(&tn.op_params[1], &max_bias, 4);
    memcpy(&tn.op_params[2], &softcap, 4);

    cuda_options opts = cuda_options_defaults; /* what a plan binds (options.h): fa_decode on */
    opts.fa_sparse = sparse;
    cuda_opts_scope bound(&opts);
    if (!flash_attn_dec_usable(&tn)) {
        printf("not usable\n");
        return 3;
    }
    /* the plan's scratch as graph.cu lays it out: partials, the int8 activations, the sync words */
    const size_t part = flash_attn_dec_scratch_bytes(&tn, n_sm), sync = flash_attn_dec_sync_bytes(&tn, n_sm);
    const size_t quant_off = (part + 255) & ~(size_t)255, quant_need = ((size_t)H * D + 255) / 256 * 256 + H * D / 32 * 8;
    const size_t sync_off = (quant_off + quant_need + 255) & ~(size_t)255;
    std::vector<char> scratch(sync_off + sync + 64, 0);
    for (size_t i = 0; i < sync_off; i++) scratch[i] = (char)0xff; /* partials must be written before read */
    op_ctx c;
    memset(&c, 0, sizeof c);
    char err[256] = "";
    c.n_sm = n_sm;
    c.scratch = scratch.data();
    c.scratch_size = scratch.size();
    c.err = err;
    c.errlen = sizeof err;
    c.quant_out = quant;
    c.quant_off = quant_off;
    c.sync_off = sync_off;
    c.sync_bytes = sync;

    /* reference */
    std::vector<double> ref(dst.size(), 0.0);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < nq; i++)
            for (int h = 0; h < H; h++) {
                const int hk = h / G;
                const double slope = has_mask ? alibi(max_bias, h, H) : 0.0;
                std::vector<double> s(n_kv, -INFINITY);
                double mx = -INFINITY;
                for (int j = 0; j < n_kv; j++) {
                    const double mv = has_mask ? (double)(mask_f32 ? mk[((size_t)b * nq_pad + i) * n_kv + j]
                                                                   : f16_bits_to_f32(mh[((size_t)b * nq_pad + i) * n_kv + j]))
                                               : 0.0;
                    if (mv == -INFINITY) continue;
                    double t = 0;
                    for (int e = 0; e < D; e++)
                        t += (double)qv[(((size_t)b * nq + i) * H + h) * D + e] * kd[((size_t)b * n_ctx + j) * kvd + hk * D + e];
                    t *= scale;
                    if (softcap != 0.0f) t = softcap * tanh(t / softcap);
                    s[j] = t + slope * mv;
                    mx = fmax(mx, s[j]);
                }
                if (mx == -INFINITY) continue;
                double L = 0;
                for (int j = 0; j < n_kv; j++) L += s[j] == -INFINITY ? 0.0 : exp(s[j] - mx);
                for (int e = 0; e < D; e++) {
                    double o = 0;
                    for (int j = 0; j < n_kv; j++)
                        if (s[j] != -INFINITY) o += exp(s[j] - mx) * vdd[((size_t)b * n_ctx + j) * kvd + hk * D + e];
                    ref[(((size_t)b * nq + i) * H + h) * D + e] = o / L;
                }
            }

    std::vector<float> first;
    for (int run = 0; run < 2; run++) {
        const int st = flash_attn_dec_launch(&tn, &c);
        if (st != PYG_OK) {
            printf("launch failed: %d %s\n", st, err);
            return 1;
        }
        for (size_t i = 0; i < sync; i++)
            if (scratch[sync_off + i]) {
                printf("FAIL: block counters not back at zero after run %d\n", run);
                return 1;
            }
        double num = 0, den = 0;
        for (size_t i = 0; i < dst.size(); i++) {
            if (!std::isfinite(dst[i])) {
                printf("FAIL: non-finite output at %zu: %g\n", i, dst[i]);
                return 1;
            }
            num += (dst[i] - ref[i]) * (dst[i] - ref[i]);
            den += ref[i] * ref[i];
        }
        const double nmse = den > 0 ? num / den : num;
        if (run == 0) {
            printf("nsplit %d chunk %d nmse %.3e\n", fd_splits(&tn, n_sm, NULL), 0, nmse);
            if (!(nmse < 1e-9)) {
                printf("FAIL: nmse %.3e\n", nmse);
                return 1;
            }
            first = dst;
        } else if (memcmp(first.data(), dst.data(), dst.size() * 4)) {
            printf("FAIL: the second run differs\n");
            return 1;
        }
        if (quant) { /* the int8 blocks: the output's quantization, block by block */
            int8_t *yq;
            float *yds;
            mul_mat_quant_layout(scratch.data() + quant_off, (int64_t)H * D, &yq, &yds);
            for (int kb = 0; kb < H * D / 32; kb++) {
                float amax = 0;
                for (int l = 0; l < 32; l++) amax = fmaxf(amax, fabsf(dst[kb * 32 + l]));
                const float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
                float sum = 0;
                for (int l = 0; l < 32; l++) {
                    const int qv8 = (int)nearbyintf(dst[kb * 32 + l] * id);
                    sum += (float)qv8;
                    if (yq[kb * 32 + l] != qv8) {
                        printf("FAIL: int8 block %d lane %d: %d, expected %d\n", kb, l, yq[kb * 32 + l], qv8);
                        return 1;
                    }
                }
                if (yds[2 * kb] != d || yds[2 * kb + 1] != d * sum) {
                    printf("FAIL: int8 block %d scale/sum %g %g, expected %g %g\n", kb, yds[2 * kb], yds[2 * kb + 1], d, d * sum);
                    return 1;
                }
            }
        }
    }
    printf("ok\n");
    return 0;
}
