/* test_hash.c - the block-hash chain: layout, prefix property, extras, errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <xxhash.h>

#include "hash_internal.h"
#include "strata/hash.h"
#include "support/unit_main.h"

static uint64_t rs = 88172645463325252ull;

static uint32_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)rs;
}

static st_hash_t seed_of(uint8_t v)
{
    st_hash_t s;

    memset(s.b, v, sizeof(s.b));
    return s;
}

/* The first block computed by hand from the specification. */
static void test_block_layout_matches_spec(void **state)
{
    uint32_t tokens[16];
    uint8_t msg[16 + 4 + 64 + 20];
    st_hash_t seed = seed_of(0xab), item = seed_of(0x11), out;
    st_hash_item_t it = {item, 10, 5};
    XXH128_hash_t x;
    size_t n;

    for (int i = 0; i < 16; i++) {
        tokens[i] = 0x01020304u * (uint32_t)i;
    }
    memcpy(msg, seed.b, 16);
    msg[16] = 16, msg[17] = msg[18] = msg[19] = 0;
    for (int i = 0; i < 16; i++) {
        for (int b = 0; b < 4; b++) {
            msg[20 + 4 * i + b] = (uint8_t)(tokens[i] >> (8 * b));
        }
    }
    x = XXH3_128bits(msg, 84);
    assert_int_equal(st_hash_chain(&seed, tokens, 16, 16, NULL, 0, &out, 1, &n), ST_OK);
    assert_int_equal(n, 1);
    for (int b = 0; b < 8; b++) {
        assert_int_equal(out.b[b], (uint8_t)(x.low64 >> (8 * b)));
        assert_int_equal(out.b[8 + b], (uint8_t)(x.high64 >> (8 * b)));
    }
    /* With an item at offset 10. */
    memcpy(msg + 84, item.b, 16);
    msg[100] = 10, msg[101] = msg[102] = msg[103] = 0;
    x = XXH3_128bits(msg, 104);
    assert_int_equal(st_hash_chain(&seed, tokens, 16, 16, &it, 1, &out, 1, &n), ST_OK);
    for (int b = 0; b < 8; b++) {
        assert_int_equal(out.b[b], (uint8_t)(x.low64 >> (8 * b)));
    }
}

static void test_prefix_property_and_divergence(void **state)
{
    enum { BT = 64, NB = 40 };
    uint32_t *tok = malloc(sizeof(uint32_t) * BT * NB);
    st_hash_t full[NB], part[NB], seed = seed_of(7);
    size_t n, m;

    for (int i = 0; i < BT * NB; i++) {
        tok[i] = rnd();
    }
    assert_int_equal(st_hash_chain(&seed, tok, BT * NB, BT, NULL, 0, full, NB, &n), ST_OK);
    assert_int_equal(n, NB);
    /* A prefix (with a partial block at the end) hashes to a prefix of the chain. */
    assert_int_equal(st_hash_chain(&seed, tok, BT * 17 + 5, BT, NULL, 0, part, NB, &m), ST_OK);
    assert_int_equal(m, 17);
    assert_memory_equal(part, full, sizeof(st_hash_t) * 17);
    /* A change in block 20 changes block 20 and every later hash, nothing earlier. */
    tok[20 * BT + 3] ^= 1;
    assert_int_equal(st_hash_chain(&seed, tok, BT * NB, BT, NULL, 0, part, NB, &m), ST_OK);
    assert_memory_equal(part, full, sizeof(st_hash_t) * 20);
    for (int i = 20; i < NB; i++) {
        assert_memory_not_equal(&part[i], &full[i], sizeof(st_hash_t));
    }
    /* Another namespace seed changes everything. */
    seed = seed_of(8);
    assert_int_equal(st_hash_chain(&seed, tok, BT * NB, BT, NULL, 0, part, NB, &m), ST_OK);
    assert_memory_not_equal(&part[0], &full[0], sizeof(st_hash_t));
    /* max_blocks caps the output. */
    assert_int_equal(st_hash_chain(&seed, tok, BT * NB, BT, NULL, 0, part, 3, &m), ST_OK);
    assert_int_equal(m, 3);
    free(tok);
}

static void test_extras_touch_only_overlapping_blocks(void **state)
{
    enum { BT = 16, NB = 8 };
    uint32_t tok[BT * NB];
    st_hash_t plain[NB], with[NB], seed = seed_of(3);
    /* An image spanning blocks 2..4 (tokens 40..70). */
    st_hash_item_t img = {seed_of(0x5a), 40, 31};
    size_t n;

    for (int i = 0; i < BT * NB; i++) {
        tok[i] = (uint32_t)i;
    }
    assert_int_equal(st_hash_chain(&seed, tok, BT * NB, BT, NULL, 0, plain, NB, &n), ST_OK);
    assert_int_equal(st_hash_chain(&seed, tok, BT * NB, BT, &img, 1, with, NB, &n), ST_OK);
    assert_memory_equal(with, plain, sizeof(st_hash_t) * 2);
    assert_memory_not_equal(&with[2], &plain[2], sizeof(st_hash_t));

    /* Block 3 sees the item at offset 40 - 48 = -8, computed by st_hash_block. */
    {
        st_hash_t b3;
        int32_t off = -8;

        assert_int_equal(st_hash_block(&with[2], tok + 48, BT, &img.content, &off, 1, &b3), ST_OK);
        assert_memory_equal(&b3, &with[3], sizeof(st_hash_t));
    }
    /* Same image at another offset: different key (the position is named). */
    img.start = 41;
    assert_int_equal(st_hash_chain(&seed, tok, BT * NB, BT, &img, 1, plain, NB, &n), ST_OK);
    assert_memory_not_equal(&plain[2], &with[2], sizeof(st_hash_t));
}

static void test_block_equals_chain(void **state)
{
    enum { BT = 32, NB = 5 };
    uint32_t tok[BT * NB];
    st_hash_t chain[NB], prev = seed_of(9), h;
    size_t n;

    for (int i = 0; i < BT * NB; i++) {
        tok[i] = rnd();
    }
    assert_int_equal(st_hash_chain(&prev, tok, BT * NB, BT, NULL, 0, chain, NB, &n), ST_OK);
    for (int i = 0; i < NB; i++) {
        assert_int_equal(st_hash_block(&prev, tok + i * BT, BT, NULL, NULL, 0, &h), ST_OK);
        assert_memory_equal(&h, &chain[i], sizeof(h));
        prev = h;
    }
}

static int have_avx2(void)
{
#if defined(__x86_64__)
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

/* The chain's split XXH3-128 (hash_impl.h) equals libxxhash's for every length. */
static void test_split_equals_xxh3(void **state)
{
    uint8_t msg[1200];
    int copies = have_avx2() ? 2 : 1;

    (void)state;
    for (size_t len = 0; len <= sizeof(msg); len++) {
        for (int rep = 0; rep < 4; rep++) {
            XXH128_hash_t want;
            uint64_t got[2];

            for (size_t j = 0; j < len; j++) {
                msg[j] = (uint8_t)(rep == 3 ? 0xff : rnd());
            }
            want = XXH3_128bits(msg, len);
            for (int c = 0; c < copies; c++) {
                if (c == 0) {
                    hash_split_test(msg, len, got);
                } else {
                    hash_split_test_avx2(msg, len, got);
                }
                if (got[0] != want.low64 || got[1] != want.high64) {
                    fail_msg("split XXH3-128 differs: len %zu rep %d copy %d", len, rep, c);
                }
            }
        }
    }
}

/*
 * Both copies of the chain loop (baseline, AVX2) against st_hash_block (one
 * XXH3_128bits per assembled message) for every block size from 16 to 512
 * tokens, without items and with items that touch some blocks, so that the
 * chain mixes blocks hashed in place, from the message buffer, and whole.
 */
static void test_chain_every_block_size(void **state)
{
    enum { NB = 7, BMAX = 512 };
    static uint32_t tok[NB * BMAX];
    st_hash_t chain[NB], prev, h;
    int copies = have_avx2() ? 2 : 1;

    (void)state;
    for (uint32_t bt = 16; bt <= BMAX; bt += 16) {
        for (int with_items = 0; with_items < 3; with_items++) {
            st_hash_item_t items[3];
            size_t n_items = 0;

            for (size_t j = 0; j < (size_t)NB * bt; j++) {
                tok[j] = rnd();
            }
            if (with_items > 0) {
                /* One inside block 1, one from block 3 into block 4; the third
                 * run adds a long item over blocks 5 and 6. */
                items[n_items++] = (st_hash_item_t){.start = bt + 3, .n_tokens = 2};
                items[n_items++] = (st_hash_item_t){.start = 4 * bt - 1, .n_tokens = 2};
                if (with_items == 2) {
                    items[n_items++] = (st_hash_item_t){.start = 5 * bt, .n_tokens = 2 * bt};
                }
                for (size_t k = 0; k < n_items; k++) {
                    for (int b = 0; b < ST_HASH_BYTES; b++) {
                        items[k].content.b[b] = (uint8_t)rnd();
                    }
                }
            }
            for (int c = 0; c < copies; c++) {
                st_hash_t seed = seed_of((uint8_t)(bt + c));

                memset(chain, 0, sizeof(chain));
                assert_int_equal(c == 0
                                     ? hash_blocks_base(&seed, tok, bt, items, n_items, chain, NB)
                                     : hash_blocks_avx2(&seed, tok, bt, items, n_items, chain, NB),
                                 ST_OK);
                prev = seed;
                for (size_t i = 0; i < NB; i++) {
                    st_hash_t ih[3];
                    int32_t off[3];
                    size_t n = 0;

                    for (size_t k = 0; k < n_items; k++) {
                        uint64_t s0 = (uint64_t)i * bt, e0 = s0 + bt;

                        if (items[k].start < e0 && items[k].start + items[k].n_tokens > s0) {
                            ih[n] = items[k].content;
                            off[n++] = (int32_t)((int64_t)items[k].start - (int64_t)s0);
                        }
                    }
                    assert_int_equal(st_hash_block(&prev, tok + i * bt, bt, ih, off, n, &h), ST_OK);
                    if (memcmp(&h, &chain[i], sizeof(h)) != 0) {
                        fail_msg("chain differs: block_tokens %u items %zu block %zu copy %d", bt,
                                 n_items, i, c);
                    }
                    prev = h;
                }
            }
        }
    }
}

static void test_invalid_input(void **state)
{
    uint32_t tok[64] = {0};
    st_hash_t seed = seed_of(1), out[4];
    st_hash_item_t items[2] = {{seed_of(2), 10, 4}, {seed_of(3), 5, 4}};
    size_t n = 12345;

    assert_int_equal(st_hash_chain(&seed, tok, 64, 24, NULL, 0, out, 4, &n), ST_ERR_INVALID);
    assert_int_equal(st_hash_chain(&seed, tok, 64, 0, NULL, 0, out, 4, &n), ST_ERR_INVALID);
    assert_int_equal(st_hash_chain(&seed, tok, 64, 8192, NULL, 0, out, 4, &n), ST_ERR_INVALID);
    assert_int_equal(st_hash_chain(&seed, tok, 64, 16, items, 2, out, 4, &n), ST_ERR_INVALID);
    items[1].start = 20;
    items[1].n_tokens = 0;
    assert_int_equal(st_hash_chain(&seed, tok, 64, 16, items, 2, out, 4, &n), ST_ERR_INVALID);
    assert_int_equal(n, 12345); /* untouched on error */
    assert_int_equal(st_hash_block(&seed, tok, 0, NULL, NULL, 0, out), ST_ERR_INVALID);
    /* Fewer tokens than a block: no hash, not an error. */
    assert_int_equal(st_hash_chain(&seed, tok, 15, 16, NULL, 0, out, 4, &n), ST_OK);
    assert_int_equal(n, 0);
}

static void test_hex_round_trip(void **state)
{
    st_hash_t h, g;
    char hex[33];

    for (int i = 0; i < 16; i++) {
        h.b[i] = (uint8_t)(i * 17);
    }
    st_hash_to_hex(&h, hex);
    assert_string_equal(hex, "00112233445566778899aabbccddeeff");
    assert_int_equal(st_hash_from_hex(hex, &g), ST_OK);
    assert_memory_equal(&g, &h, sizeof(h));
    assert_int_equal(st_hash_from_hex("0112", &g), ST_ERR_INVALID);
    assert_int_equal(st_hash_from_hex("zz12233445566778899aabbccddeeff0", &g), ST_ERR_INVALID);
    assert_int_equal(st_hash_lo64(&h), 0x7766554433221100ull);
}

/* st_hash_image: the header and pixels of docs/hashing.md, hashed by hand. */
static void test_image_layout_matches_spec(void **state)
{
    enum { W = 5, H = 3, C = 3 };
    uint8_t px[W * H * C], msg[24 + W * H * C];
    const uint32_t head[6] = {ST_IMAGE_HASH_MAGIC, 1, W, H, C, ST_IMAGE_FORMAT_U8};
    st_hash_t out;
    XXH128_hash_t x;

    for (int i = 0; i < W * H * C; i++) {
        px[i] = (uint8_t)(i * 7 + 1);
    }
    for (int f = 0; f < 6; f++) {
        for (int b = 0; b < 4; b++) {
            msg[4 * f + b] = (uint8_t)(head[f] >> (8 * b));
        }
    }
    assert_memory_equal(msg, "STIM", 4);
    memcpy(msg + 24, px, sizeof(px));
    x = XXH3_128bits(msg, sizeof(msg));
    assert_int_equal(st_hash_image(px, W, H, C, &out), ST_OK);
    for (int b = 0; b < 8; b++) {
        assert_int_equal(out.b[b], (uint8_t)(x.low64 >> (8 * b)));
        assert_int_equal(out.b[8 + b], (uint8_t)(x.high64 >> (8 * b)));
    }
}

/* Every pixel and the shape are named: one changed sample, or the same
 * bytes read as another shape or channel count, gives another hash. */
static void test_image_every_pixel_and_shape(void **state)
{
    enum { W = 64, H = 48, C = 3, N = W * H * C };
    uint8_t *px = malloc(N);
    st_hash_t base, h;

    assert_non_null(px);
    for (int i = 0; i < N; i++) {
        px[i] = (uint8_t)rnd();
    }
    assert_int_equal(st_hash_image(px, W, H, C, &base), ST_OK);
    for (int i = 0; i < N; i += 97) {
        px[i] ^= 1;
        assert_int_equal(st_hash_image(px, W, H, C, &h), ST_OK);
        assert_memory_not_equal(&h, &base, sizeof(h));
        px[i] ^= 1;
    }
    px[N - 1] ^= 0x80;
    assert_int_equal(st_hash_image(px, W, H, C, &h), ST_OK);
    assert_memory_not_equal(&h, &base, sizeof(h));
    px[N - 1] ^= 0x80;
    assert_int_equal(st_hash_image(px, W, H, C, &h), ST_OK);
    assert_memory_equal(&h, &base, sizeof(h));
    /* Same bytes, other shapes. */
    assert_int_equal(st_hash_image(px, H, W, C, &h), ST_OK);
    assert_memory_not_equal(&h, &base, sizeof(h));
    assert_int_equal(st_hash_image(px, W * 3, H, 1, &h), ST_OK);
    assert_memory_not_equal(&h, &base, sizeof(h));
    assert_int_equal(st_hash_image(px, W / 2, H * 2, C, &h), ST_OK);
    assert_memory_not_equal(&h, &base, sizeof(h));
    free(px);
}

static void test_image_invalid(void **state)
{
    uint8_t px[12] = {0};
    st_hash_t out = seed_of(0x77), keep = seed_of(0x77);

    assert_int_equal(st_hash_image(px, 0, 4, 3, &out), ST_ERR_INVALID);
    assert_int_equal(st_hash_image(px, 4, 0, 3, &out), ST_ERR_INVALID);
    assert_int_equal(st_hash_image(px, ST_IMAGE_SIDE_MAX + 1, 1, 1, &out), ST_ERR_INVALID);
    assert_int_equal(st_hash_image(px, 1, ST_IMAGE_SIDE_MAX + 1, 1, &out), ST_ERR_INVALID);
    assert_int_equal(st_hash_image(px, 2, 2, 2, &out), ST_ERR_INVALID);
    assert_int_equal(st_hash_image(px, 2, 2, 4, &out), ST_ERR_INVALID);
    assert_int_equal(st_hash_image(px, 2, 2, 0, &out), ST_ERR_INVALID);
    assert_int_equal(st_hash_image(NULL, 2, 2, 3, &out), ST_ERR_INVALID);
    assert_int_equal(st_hash_image(px, 2, 2, 3, NULL), ST_ERR_INVALID);
    assert_memory_equal(&out, &keep, sizeof(out)); /* untouched on error */
    assert_int_equal(st_hash_image(px, 2, 2, 3, &out), ST_OK);
}

int main(void)
{
    UNIT_RUN(
        cmocka_unit_test(test_block_layout_matches_spec),
        cmocka_unit_test(test_prefix_property_and_divergence),
        cmocka_unit_test(test_extras_touch_only_overlapping_blocks),
        cmocka_unit_test(test_block_equals_chain), cmocka_unit_test(test_split_equals_xxh3),
        cmocka_unit_test(test_chain_every_block_size), cmocka_unit_test(test_invalid_input),
        cmocka_unit_test(test_hex_round_trip), cmocka_unit_test(test_image_layout_matches_spec),
        cmocka_unit_test(test_image_every_pixel_and_shape), cmocka_unit_test(test_image_invalid));
}
