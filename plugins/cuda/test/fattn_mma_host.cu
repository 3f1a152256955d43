/* plugins/cuda/test/fattn_mma_host.cu — the prefill flash attention of fattn_mma.cuh (fa_mma=2) run
 * on the CPU: its kernel body on emulated thread blocks (simt_host.h: mma.sync and ldmatrix with the
 * PTX ISA's fragment layouts, written out apart from the kernel), against a double-precision
 * attention over the same f16 K/V and f32 Q.
 *   fattn_mma_host            every case below; exit 0 when all match
 * Cases: head sizes 64 and 128, grouped-query widths, query counts that are not a multiple of the
 * 64-query block, kv counts that are not a multiple of the 64-cell tile, batches with broadcast
 * masks, masks: none, causal after a prefix (a cache at depth), holes, a query row that sees
 * nothing (zeros), a mask row shorter than a multiple of 8 cells, a cache extent past the last seen
 * cell (tiles the scan drops); softcap and ALiBi. K/V cells a
 * mask hides from every query hold 32768, so a kernel that lets one through fails (not NaN: a
 * hidden cell inside a tile another row sees is multiplied by p = 0, as in every flash attention). tests/test_cuda_fattn_mma.py builds
 * and runs it. */
#define PYG_SIMT_HOST 1
#include "simt_host.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>
#include "fattn_mma.cuh"

static uint32_t g_rng = 2024;
static uint32_t rnd() { g_rng = g_rng * 1664525u + 1013904223u; return g_rng >> 8; }
static float rndf() { return (float)rnd() / 16777216.0f * 2.0f - 1.0f; }

static uint16_t to_h(float f) {
    const gpu_half h = gpu_float2half(f);
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}

struct fcase {
    int D, H, Hkv, n_q, n_kv, B;
    const char *mask; /* none | causal | holes | blind (row 1 sees nothing) */
    int depth;        /* causal: cells before the queries */
    int m_ne0;        /* mask row length (>= n_kv); 0: n_kv */
    float softcap, max_bias;
};

static int run_case(const fcase &c) {
    const int D = c.D, kv_pitch = D + 8; /* K/V rows padded like a cache view */
    const int m_ne0 = c.m_ne0 ? c.m_ne0 : c.n_kv, m_pitch = (m_ne0 + 7) / 8 * 8 + 8;
    std::vector<float> q((size_t)D * c.n_q * c.H * c.B);
    std::vector<uint16_t> k((size_t)kv_pitch * c.n_kv * c.Hkv * c.B), v(k.size());
    std::vector<uint16_t> m((size_t)m_pitch * c.n_q + 8, 0);
    for (auto &x : q) x = rndf();
    for (auto &x : k) x = to_h(rndf());
    for (auto &x : v) x = to_h(rndf());
    const bool has_mask = strcmp(c.mask, "none") != 0;
    auto visible = [&](int iq, int j) {
        if (!has_mask) return true;
        if (!strcmp(c.mask, "causal")) return j <= c.depth + iq;
        if (!strcmp(c.mask, "blind")) return iq != 1 && j <= c.depth + iq;
        return ((iq * 131 + j * 29) % 7) != 0 && j <= c.depth + iq; /* holes */
    };
    for (int iq = 0; iq < c.n_q; iq++)
        for (int j = 0; j < m_ne0; j++)
            m[(size_t)iq * m_pitch + j] = visible(iq, j) ? to_h(c.max_bias > 0 ? -(float)(c.depth + iq - j) : 0.0f) : 0xfc00u;
    /* hidden cells hold 32768 in K and V of every head and batch */
    for (int b = 0; b < c.B; b++)
        for (int hk = 0; hk < c.Hkv; hk++)
            for (int j = 0; j < c.n_kv; j++) {
                bool seen = false;
                for (int iq = 0; iq < c.n_q; iq++) seen = seen || visible(iq, j);
                if (!seen)
                    for (int d = 0; d < D; d++) {
                        const size_t o = (((size_t)b * c.Hkv + hk) * c.n_kv + j) * kv_pitch + d;
                        k[o] = 0x7800u;
                        v[o] = 0x7800u;
                    }
            }
    std::vector<float> out((size_t)D * c.H * c.n_q * c.B, -12345.0f);
    fa2_args a;
    memset(&a, 0, sizeof a);
    a.q = (const char *)q.data();
    a.k = (const char *)k.data();
    a.v = (const char *)v.data();
    a.mask = has_mask ? (const char *)m.data() : NULL;
    a.dst = (char *)out.data();
    a.q_nb1 = (int64_t)D * 4; a.q_nb2 = a.q_nb1 * c.n_q; a.q_nb3 = a.q_nb2 * c.H;
    a.k_nb1 = (int64_t)kv_pitch * 2; a.k_nb2 = a.k_nb1 * c.n_kv; a.k_nb3 = a.k_nb2 * c.Hkv;
    a.v_nb1 = a.k_nb1; a.v_nb2 = a.k_nb2; a.v_nb3 = a.k_nb3;
    a.m_nb1 = (int64_t)m_pitch * 2; a.m_nb2 = a.m_nb1 * c.n_q; a.m_nb3 = a.m_nb2;
    a.m_ne0 = m_ne0; a.m_ne2 = 1; a.m_ne3 = 1; /* one mask for every head and batch (broadcast) */
    a.d_nb1 = (int64_t)D * 4; a.d_nb2 = a.d_nb1 * c.H; a.d_nb3 = a.d_nb2 * c.n_q; /* dst: [D, H, n_q, B] */
    a.n_q = c.n_q; a.n_kv = c.n_kv; a.H = c.H; a.gqa = c.H / c.Hkv; a.k_ne3 = c.B; a.v_ne3 = c.B;
    a.nqb = (c.n_q + FA2_QB - 1) / FA2_QB;
    a.scale = 1.0f / sqrtf((float)D);
    a.max_bias = c.max_bias;
    a.softcap = c.softcap;
    const size_t smem = D == 64 ? fa2_smem<64>::BYTES : fa2_smem<128>::BYTES;
    simt_launch(c.H, (int64_t)a.nqb * c.B, FA2_THREADS, smem, [&](HostThr &t, unsigned char *sm) {
        if (D == 64) fa2_body<64>(t, a, sm);
        else fa2_body<128>(t, a, sm);
    });
    double num = 0, den = 0;
    int bad = 0;
    for (int b = 0; b < c.B; b++)
        for (int h = 0; h < c.H; h++) {
            const int hk = h / (c.H / c.Hkv);
            const double slope = alibi_slope(c.max_bias, h, c.H);
            for (int iq = 0; iq < c.n_q; iq++) {
                std::vector<double> s(c.n_kv, -INFINITY);
                double mx = -INFINITY;
                for (int j = 0; j < c.n_kv; j++) {
                    if (!visible(iq, j)) continue;
                    double dot = 0;
                    for (int d = 0; d < D; d++)
                        dot += (double)q[(((size_t)b * c.H + h) * c.n_q + iq) * D + d] *
                               host_half(k[(((size_t)b * c.Hkv + hk) * c.n_kv + j) * kv_pitch + d]);
                    double x = dot * a.scale;
                    if (c.softcap != 0.0f) x = c.softcap * tanh(x / c.softcap);
                    x += slope * host_half(m[(size_t)iq * m_pitch + j]);
                    s[j] = x;
                    mx = fmax(mx, x);
                }
                double l = 0;
                std::vector<double> o(D, 0.0);
                for (int j = 0; j < c.n_kv; j++) {
                    if (s[j] == -INFINITY) continue;
                    const double p = exp(s[j] - mx);
                    l += p;
                    for (int d = 0; d < D; d++) o[d] += p * host_half(v[(((size_t)b * c.Hkv + hk) * c.n_kv + j) * kv_pitch + d]);
                }
                for (int d = 0; d < D; d++) {
                    const double ref = l > 0 ? o[d] / l : 0.0;
                    const float got = out[(((size_t)b * c.n_q + iq) * c.H + h) * D + d];
                    if (!(fabs(got - ref) < 0.05) && bad++ < 5)
                        fprintf(stderr, "  b %d h %d q %d d %d: got %g, want %g\n", b, h, iq, d, got, ref);
                    if (l == 0 && got != 0.0f && bad++ < 5) fprintf(stderr, "  row q %d sees nothing: got %g\n", iq, got);
                    num += (got - ref) * (got - ref);
                    den += ref * ref;
                }
            }
        }
    const double nmse = den > 0 ? num / den : num;
    const bool ok = bad == 0 && nmse < 1e-5;
    fprintf(stderr, "%s D %d H %d/%d n_q %d n_kv %d B %d mask %s depth %d m_ne0 %d softcap %g alibi %g: nmse %.3g\n",
            ok ? "ok  " : "FAIL", D, c.H, c.Hkv, c.n_q, c.n_kv, c.B, c.mask, c.depth, m_ne0, c.softcap, c.max_bias, nmse);
    return ok ? 0 : 1;
}

int main() {
    const fcase cases[] = {
        { 64, 4, 1, 70, 200, 1, "causal", 130, 0, 0.0f, 0.0f },   /* the 1b layout at depth, gqa 4 */
        { 128, 2, 2, 64, 64, 1, "causal", 0, 0, 0.0f, 0.0f },     /* one tile, prefill from empty */
        { 128, 2, 1, 33, 150, 1, "holes", 117, 0, 0.0f, 0.0f },
        { 64, 2, 2, 20, 90, 2, "blind", 70, 0, 0.0f, 0.0f },      /* batches, a row that sees nothing */
        { 64, 2, 1, 16, 77, 1, "causal", 61, 77, 0.0f, 0.0f },    /* mask row of 77 cells */
        { 64, 2, 2, 40, 100, 1, "none", 0, 0, 0.0f, 0.0f },
        { 128, 2, 2, 24, 130, 1, "causal", 106, 0, 20.0f, 8.0f },  /* softcap and ALiBi */
        { 128, 4, 1, 24, 130, 1, "causal", 106, 0, 20.0f, 8.0f },  /* ALiBi slopes over grouped heads */
        { 64, 8, 1, 13, 100, 1, "holes", 87, 0, 0.0f, 0.0f },      /* 8 heads per K/V head */
        /* a cache extent longer than the context: tiles past the last seen cell are not walked */
        { 64, 4, 1, 70, 330, 1, "causal", 60, 0, 0.0f, 0.0f },
        { 64, 2, 1, 100, 520, 2, "blind", 5, 0, 0.0f, 0.0f },     /* second block's rows: a shorter tail */
        { 128, 2, 1, 40, 300, 1, "holes", 17, 0, 0.0f, 8.0f },
    };
    int fails = 0;
    for (const fcase &c : cases) {
        fails += run_case(c);
    }
    return fails ? 1 : 0;
}
