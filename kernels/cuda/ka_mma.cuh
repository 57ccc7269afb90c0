/*
 * ka_mma.cuh - the tensor-core building blocks of the sparse attention kernel (attn.cu): the
 * swizzled layout of its shared-memory tiles, ldmatrix, mma.sync, the wgmma instructions and
 * their descriptors (sm_90a builds only: KA_WGMMA), and cp.async.
 */
#ifndef STRATA_KA_MMA_CUH
#define STRATA_KA_MMA_CUH

#include <stdint.h>

/*
 * Element offset of (row, col) in a 64-row tile, stored as 128-byte-wide column panels
 * (64 values each, panel after panel) with the 128-byte swizzle of wgmma: in each
 * 8-row x 128-byte atom the 16-byte chunk c of row r sits at chunk c ^ (r & 7). ldmatrix
 * reads it without bank conflicts and wgmma descriptors describe it directly.
 */
__device__ __forceinline__ int ka_swz(int row, int col)
{
    return (col >> 6) * (64 * 64) + row * 64 + ((((col >> 3) ^ row) & 7) << 3) + (col & 7);
}

__device__ __forceinline__ uint32_t ka_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void ka_ldm_x4(uint32_t *r, const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(ka_smem_addr(p)));
}

__device__ __forceinline__ void ka_ldm_x4_t(uint32_t *r, const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(ka_smem_addr(p)));
}

__device__ __forceinline__ void ka_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KA_WGMMA 1
/* wgmma shared-memory descriptor: 128-byte swizzle, 8-row groups 1024 bytes apart. */
__device__ __forceinline__ uint64_t ka_desc(uint32_t addr)
{
    return (uint64_t)((addr & 0x3ffff) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}

/* d (64 heads x 32 rows, this thread's 16 values) += A (64 x 16) * B (32 x 16)^T. */
__device__ __forceinline__ void ka_wgmma_64x32(float (&d)[4][4], uint64_t da, uint64_t db)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
          "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
          "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
        : "l"(da), "l"(db), "r"(1));
}
/* The 128 accumulator operands of an m64n256 wgmma (d[i][j][e]: columns (8i + j) * 8 ..). */
#define KA_D128(d)                                                                                \
    "+f"(d[0][0][0]), "+f"(d[0][0][1]), "+f"(d[0][0][2]), "+f"(d[0][0][3]), "+f"(d[0][1][0]),     \
        "+f"(d[0][1][1]), "+f"(d[0][1][2]), "+f"(d[0][1][3]), "+f"(d[0][2][0]), "+f"(d[0][2][1]), \
        "+f"(d[0][2][2]), "+f"(d[0][2][3]), "+f"(d[0][3][0]), "+f"(d[0][3][1]), "+f"(d[0][3][2]), \
        "+f"(d[0][3][3]), "+f"(d[0][4][0]), "+f"(d[0][4][1]), "+f"(d[0][4][2]), "+f"(d[0][4][3]), \
        "+f"(d[0][5][0]), "+f"(d[0][5][1]), "+f"(d[0][5][2]), "+f"(d[0][5][3]), "+f"(d[0][6][0]), \
        "+f"(d[0][6][1]), "+f"(d[0][6][2]), "+f"(d[0][6][3]), "+f"(d[0][7][0]), "+f"(d[0][7][1]), \
        "+f"(d[0][7][2]), "+f"(d[0][7][3]), "+f"(d[1][0][0]), "+f"(d[1][0][1]), "+f"(d[1][0][2]), \
        "+f"(d[1][0][3]), "+f"(d[1][1][0]), "+f"(d[1][1][1]), "+f"(d[1][1][2]), "+f"(d[1][1][3]), \
        "+f"(d[1][2][0]), "+f"(d[1][2][1]), "+f"(d[1][2][2]), "+f"(d[1][2][3]), "+f"(d[1][3][0]), \
        "+f"(d[1][3][1]), "+f"(d[1][3][2]), "+f"(d[1][3][3]), "+f"(d[1][4][0]), "+f"(d[1][4][1]), \
        "+f"(d[1][4][2]), "+f"(d[1][4][3]), "+f"(d[1][5][0]), "+f"(d[1][5][1]), "+f"(d[1][5][2]), \
        "+f"(d[1][5][3]), "+f"(d[1][6][0]), "+f"(d[1][6][1]), "+f"(d[1][6][2]), "+f"(d[1][6][3]), \
        "+f"(d[1][7][0]), "+f"(d[1][7][1]), "+f"(d[1][7][2]), "+f"(d[1][7][3]), "+f"(d[2][0][0]), \
        "+f"(d[2][0][1]), "+f"(d[2][0][2]), "+f"(d[2][0][3]), "+f"(d[2][1][0]), "+f"(d[2][1][1]), \
        "+f"(d[2][1][2]), "+f"(d[2][1][3]), "+f"(d[2][2][0]), "+f"(d[2][2][1]), "+f"(d[2][2][2]), \
        "+f"(d[2][2][3]), "+f"(d[2][3][0]), "+f"(d[2][3][1]), "+f"(d[2][3][2]), "+f"(d[2][3][3]), \
        "+f"(d[2][4][0]), "+f"(d[2][4][1]), "+f"(d[2][4][2]), "+f"(d[2][4][3]), "+f"(d[2][5][0]), \
        "+f"(d[2][5][1]), "+f"(d[2][5][2]), "+f"(d[2][5][3]), "+f"(d[2][6][0]), "+f"(d[2][6][1]), \
        "+f"(d[2][6][2]), "+f"(d[2][6][3]), "+f"(d[2][7][0]), "+f"(d[2][7][1]), "+f"(d[2][7][2]), \
        "+f"(d[2][7][3]), "+f"(d[3][0][0]), "+f"(d[3][0][1]), "+f"(d[3][0][2]), "+f"(d[3][0][3]), \
        "+f"(d[3][1][0]), "+f"(d[3][1][1]), "+f"(d[3][1][2]), "+f"(d[3][1][3]), "+f"(d[3][2][0]), \
        "+f"(d[3][2][1]), "+f"(d[3][2][2]), "+f"(d[3][2][3]), "+f"(d[3][3][0]), "+f"(d[3][3][1]), \
        "+f"(d[3][3][2]), "+f"(d[3][3][3]), "+f"(d[3][4][0]), "+f"(d[3][4][1]), "+f"(d[3][4][2]), \
        "+f"(d[3][4][3]), "+f"(d[3][5][0]), "+f"(d[3][5][1]), "+f"(d[3][5][2]), "+f"(d[3][5][3]), \
        "+f"(d[3][6][0]), "+f"(d[3][6][1]), "+f"(d[3][6][2]), "+f"(d[3][6][3]), "+f"(d[3][7][0]), \
        "+f"(d[3][7][1]), "+f"(d[3][7][2]), "+f"(d[3][7][3])
/* The operand list of those 128 accumulators in a wgmma instruction, with its comma. */
#define KA_D128_LIST                                                                             \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%"   \
    "24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%"   \
    "46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%"   \
    "68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%"   \
    "90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%" \
    "110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127},"
/* The 32 accumulator operands of an m64n64 wgmma (d[j][e]: columns 8j ..). */
#define KA_D32(d)                                                                                 \
    "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),     \
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), \
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), \
        "+f"(d[7][2]), "+f"(d[7][3])

/* d (64 heads x 256 columns, this thread's 128 values) += A (64 x 16, K-major) * B (16 x 256,
 * MN-major: rows of V are K, their values N). */
__device__ __forceinline__ void ka_wgmma_64x256_tb(float (&d)[4][8][4], uint64_t da, uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " KA_D128_LIST
                 " %128, %129, p, 1, 1, 0, 1;\n"
                 "}\n"
                 : KA_D128(d)
                 : "l"(da), "l"(db), "r"(1));
}

/* The same with A (P: 64 x 16) in registers, laid out as the accumulator of ka_wgmma_64x64. */
__device__ __forceinline__ void ka_wgmma_64x256_rs(float (&d)[4][8][4], const uint32_t (&a)[4],
                                                   uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " KA_D128_LIST
                 " {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n"
                 "}\n"
                 : KA_D128(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

/* d (64 heads x 64 rows) = (ScaleD ? d : 0) + A (64 x 16) * B (64 x 16)^T, both in shared memory. */
template <int ScaleD>
__device__ __forceinline__ void ka_wgmma_64x64(float (&d)[8][4], uint64_t da, uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%"
                 "22,%23,%24,%25,%26,%27,%28,%29,%30,%31},"
                 " %32, %33, p, 1, 1, 0, 0;\n"
                 "}\n"
                 : KA_D32(d)
                 : "l"(da), "l"(db), "n"(ScaleD));
}

/* Descriptor of an MN-major operand: 128-byte swizzle; KA_PV_LBO between 64-column panels,
 * KA_PV_SBO between 8-row groups (bytes). */
#ifndef KA_PV_LBO
#define KA_PV_LBO (64 * 128)
#define KA_PV_SBO 1024
#endif
__device__ __forceinline__ uint64_t ka_desc_mn(uint32_t addr)
{
    return (uint64_t)((addr & 0x3ffff) >> 4) | ((uint64_t)(KA_PV_LBO >> 4) << 16) |
           ((uint64_t)(KA_PV_SBO >> 4) << 32) | ((uint64_t)1 << 62);
}
#endif

__device__ __forceinline__ void ka_cp16(void *dst, const void *src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(ka_smem_addr(dst)), "l"(src));
}

#endif
