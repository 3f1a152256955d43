#version 450
// dst[m, n] = sum_k src0[k, m] * src1[k, n], tiled: 64x64 outputs per workgroup of 256 threads
// (4x4 each), K in steps of 16 staged (dequantized to f32) in shared memory.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint TY = 0u;
#define BM 64u
#define BN 64u
#define BK 16u
shared float As[BK][BM + 1u];
shared float Bs[BK][BN + 1u];

void main() {
    uint w = wg_linear();
    if (w >= ex_u(0u)) return;
    uint M = t_ne(0u, 1u), N = t_ne(1u, 1u), B2 = t_ne(1u, 2u), K = t_ne(0u, 0u);
    uint tm = (M + BM - 1u) / BM, tn = (N + BN - 1u) / BN;
    uint bm = w % tm; w /= tm;
    uint bn = w % tn; w /= tn;
    uint i12 = w % B2, i13 = w / B2;
    uint i02 = i12 / (B2 / t_ne(0u, 2u)), i03 = i13 / (t_ne(1u, 3u) / t_ne(0u, 3u));
    uint nb0 = t_nb(0u, 0u), ynb0 = t_nb(1u, 0u), yty = t_type(1u);
    uint t = gl_LocalInvocationID.x;
    uint tx = t % 16u, ty = t / 16u;
    float acc[4][4];
    for (uint a = 0u; a < 4u; a++) for (uint b = 0u; b < 4u; b++) acc[a][b] = 0.0;
    // loader mapping: 4 elements per thread per tile; element e = t + 256*j -> (row = e / BK, kk = e % BK)
    for (uint k0 = 0u; k0 < K; k0 += BK) {
        for (uint j = 0u; j < 4u; j++) {
            uint e = t + 256u * j;
            uint r = e / BK, kk = e % BK;
            uint m = bm * BM + r, n = bn * BN + r, k = k0 + kk;
            As[kk][r] = (m < M && k < K) ? deq(0u, t_row(0u, m, i02, i03), k, TY, nb0) : 0.0;
            Bs[kk][r] = (n < N && k < K) ? ldf(1u, t_row(1u, n, i12, i13) + k * ynb0, yty) : 0.0;
        }
        barrier();
        for (uint kk = 0u; kk < BK; kk++) {
            float a[4], b[4];
            for (uint q = 0u; q < 4u; q++) { a[q] = As[kk][tx + 16u * q]; b[q] = Bs[kk][ty + 16u * q]; }
            for (uint x = 0u; x < 4u; x++) for (uint y = 0u; y < 4u; y++) acc[x][y] += a[x] * b[y];
        }
        barrier();
    }
    for (uint x = 0u; x < 4u; x++) for (uint y = 0u; y < 4u; y++) {
        uint m = bm * BM + tx + 16u * x, n = bn * BN + ty + 16u * y;
        if (m < M && n < N) stf(t_at(4u, m, n, i12, i13), t_type(4u), acc[x][y]);
    }
}
