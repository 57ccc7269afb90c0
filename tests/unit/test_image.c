/* test_image.c - image files and synthetic images (common/image.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <png.h>

#include "image.h"
#include "strata/hash.h"
#include "support/unit_main.h"

/* st_hash_image of im_generate(1, 32, 24, 3) and (1, 32, 24, 1). */
#define IM_TEST_PIN_RGB  "a6fb4814323e70b970315c6257aa40a8"
#define IM_TEST_PIN_GREY "9c0e9c2d580ca4729f66b49b304c5c7e"

static char tmpdir[] = "/tmp/test_image.XXXXXX";

static void path_of(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", tmpdir, name);
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");

    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* The generator is deterministic: pinned hashes (integer arithmetic only, so
 * every machine must give these), and different seeds differ. */
static void test_generate_is_deterministic(void **state)
{
    im_image_t a = {0}, b = {0};
    st_hash_t ha, hb;
    char hex[33];

    assert_int_equal(im_generate(1, 32, 24, 3, &a), ST_OK);
    assert_int_equal(im_generate(1, 32, 24, 3, &b), ST_OK);
    assert_int_equal(a.width, 32);
    assert_int_equal(a.height, 24);
    assert_int_equal(a.channels, 3);
    assert_memory_equal(a.pixels, b.pixels, im_bytes(&a));
    assert_int_equal(st_hash_image(a.pixels, 32, 24, 3, &ha), ST_OK);
    st_hash_to_hex(&ha, hex);
    assert_string_equal(hex, IM_TEST_PIN_RGB);
    im_free(&b);
    assert_int_equal(im_generate(2, 32, 24, 3, &b), ST_OK);
    assert_int_equal(st_hash_image(b.pixels, 32, 24, 3, &hb), ST_OK);
    assert_memory_not_equal(&ha, &hb, sizeof(ha));
    im_free(&b);
    assert_int_equal(im_generate(1, 32, 24, 1, &b), ST_OK);
    assert_int_equal(st_hash_image(b.pixels, 32, 24, 1, &hb), ST_OK);
    st_hash_to_hex(&hb, hex);
    assert_string_equal(hex, IM_TEST_PIN_GREY);
    im_free(&a);
    im_free(&b);
    assert_null(b.pixels);
    assert_int_equal(im_generate(1, 0, 24, 3, &a), ST_ERR_INVALID);
    assert_int_equal(im_generate(1, 8, 8, 2, &a), ST_ERR_INVALID);
    assert_int_equal(im_generate(1, 16384, 16384, 3, &a), ST_ERR_EXHAUSTED);
    assert_null(a.pixels);
}

/* PGM, PPM and PNG, grey and RGB: written by im_save, read back equal. */
static void test_save_load_round_trip(void **state)
{
    static const char *const names[] = {"a.ppm", "a.png"};
    char path[256], why[256];

    for (uint32_t c = 1; c <= 3; c += 2) {
        for (int k = 0; k < 2; k++) {
            im_image_t img = {0}, back = {0};

            assert_int_equal(im_generate(7 + c, 37, 19, c, &img), ST_OK);
            path_of(path, sizeof(path), names[k]);
            assert_int_equal(im_save(path, &img, why, sizeof(why)), ST_OK);
            assert_int_equal(im_load(path, &back, why, sizeof(why)), ST_OK);
            assert_int_equal(back.width, 37);
            assert_int_equal(back.height, 19);
            assert_int_equal(back.channels, c);
            assert_memory_equal(back.pixels, img.pixels, im_bytes(&img));
            im_free(&img);
            im_free(&back);
        }
    }
}

/* A PNG with alpha is composited onto black; a grey+alpha PNG stays grey. */
static void test_png_alpha_and_grey_alpha(void **state)
{
    uint8_t rgba[2 * 1 * 4] = {200, 100, 50, 255, 200, 100, 50, 0};
    uint8_t ga[2 * 2] = {90, 255, 90, 0};
    uint8_t mem[4096];
    png_alloc_size_t n = sizeof(mem);
    png_image pi;
    im_image_t img = {0};
    char why[256];

    memset(&pi, 0, sizeof(pi));
    pi.version = PNG_IMAGE_VERSION, pi.width = 2, pi.height = 1, pi.format = PNG_FORMAT_RGBA;
    assert_true(png_image_write_to_memory(&pi, mem, &n, 0, rgba, 0, NULL));
    assert_int_equal(im_decode(mem, n, &img, why, sizeof(why)), ST_OK);
    assert_int_equal(img.channels, 3);
    assert_memory_equal(img.pixels, ((uint8_t[]){200, 100, 50, 0, 0, 0}), 6);
    im_free(&img);

    memset(&pi, 0, sizeof(pi));
    n = sizeof(mem);
    pi.version = PNG_IMAGE_VERSION, pi.width = 2, pi.height = 1, pi.format = PNG_FORMAT_GA;
    assert_true(png_image_write_to_memory(&pi, mem, &n, 0, ga, 0, NULL));
    assert_int_equal(im_decode(mem, n, &img, why, sizeof(why)), ST_OK);
    assert_int_equal(img.channels, 1);
    assert_int_equal(img.pixels[0], 90);
    assert_int_equal(img.pixels[1], 0);
    im_free(&img);
}

static void expect_refused(const char *bytes, size_t n, st_status_t want, const char *phrase)
{
    im_image_t img = {7, 7, 7, NULL};
    char why[256];

    assert_int_equal(im_decode((const uint8_t *)bytes, n, &img, why, sizeof(why)), want);
    if (strstr(why, phrase) == NULL) {
        fail_msg("reason \"%s\" does not say \"%s\"", why, phrase);
    }
    assert_int_equal(img.width, 7); /* untouched */
    assert_null(img.pixels);
}

/* Bad files: a clear reason naming what is wrong; nothing allocated. */
static void test_bad_files_are_refused_with_reasons(void **state)
{
    char why[256], path[256];
    im_image_t img = {0};
    static const char good[] = "P5 2 2 255\n\1\2\3\4";

    assert_int_equal(im_decode((const uint8_t *)good, sizeof(good) - 1, &img, why, sizeof(why)),
                     ST_OK);
    assert_memory_equal(img.pixels, "\1\2\3\4", 4);
    im_free(&img);
    /* Comments in the header are fine. */
    static const char commented[] = "P6\n# made by hand\n1 # w\n1\n255\n\7\10\11";
    assert_int_equal(
        im_decode((const uint8_t *)commented, sizeof(commented) - 1, &img, why, sizeof(why)),
        ST_OK);
    assert_int_equal(img.channels, 3);
    im_free(&img);

    expect_refused("P5 2 2 65535\n\1\2\3\4\5\6\7\10", 21, ST_ERR_INVALID, "maxval 65535");
    expect_refused("P5 2 2 255\n\1\2\3", 14, ST_ERR_INVALID, "truncated");
    expect_refused("P5 2 2 255\n\1\2\3\4\5", 16, ST_ERR_INVALID, "trailing bytes");
    expect_refused("P5 0 2 255\n", 11, ST_ERR_INVALID, "out of range");
    expect_refused("P5 x 2 255\n", 11, ST_ERR_INVALID, "width");
    expect_refused("P5 2 2", 6, ST_ERR_INVALID, "maxval");
    expect_refused("P6 16384 16384 255\n", 19, ST_ERR_EXHAUSTED, "samples");
    expect_refused("P3 1 1 255\n0 0 0", 16, ST_ERR_INVALID, "not a binary PGM/PPM");
    expect_refused("\x89PNG\r\n\x1a\nbroken", 14, ST_ERR_INVALID, "PNG");
    expect_refused("", 0, ST_ERR_INVALID, "0 bytes");

    path_of(path, sizeof(path), "missing.ppm");
    assert_int_equal(im_load(path, &img, why, sizeof(why)), ST_ERR_IO);
    assert_non_null(strstr(why, "missing.ppm"));
    path_of(path, sizeof(path), "bad.ppm");
    write_bytes(path, "P6 1 1 255\n\1", 12);
    assert_int_equal(im_load(path, &img, why, sizeof(why)), ST_ERR_INVALID);
    assert_non_null(strstr(why, "bad.ppm: PPM 1x1"));
    assert_null(img.pixels);
    /* A reason is cut to its buffer, never past it. */
    why[3] = 'X';
    assert_int_equal(im_decode((const uint8_t *)"zz", 2, &img, why, 3), ST_ERR_INVALID);
    assert_int_equal(why[2], '\0');
    assert_int_equal(why[3], 'X');
    assert_int_equal(im_decode((const uint8_t *)"zz", 2, &img, NULL, 0), ST_ERR_INVALID);
}

/* im_save never leaves a half-written file under the name. */
static void test_save_refuses_bad_image(void **state)
{
    char path[256], why[256];
    im_image_t bad = {0, 4, 3, (uint8_t *)"x"};

    path_of(path, sizeof(path), "never.ppm");
    assert_int_equal(im_save(path, &bad, why, sizeof(why)), ST_ERR_INVALID);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(
        im_save("/nonexistent-dir/x.png", &(im_image_t){1, 1, 1, (uint8_t *)"x"}, why, sizeof(why)),
        ST_ERR_IO);
}

int main(void)
{
    char cmd[300];
    int rc;

    if (mkdtemp(tmpdir) == NULL) {
        return 1;
    }
    {
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_generate_is_deterministic),
            cmocka_unit_test(test_save_load_round_trip),
            cmocka_unit_test(test_png_alpha_and_grey_alpha),
            cmocka_unit_test(test_bad_files_are_refused_with_reasons),
            cmocka_unit_test(test_save_refuses_bad_image),
        };
        rc = cmocka_run_group_tests(tests, NULL, NULL);
    }
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    if (system(cmd) != 0) {
        return 1;
    }
    return rc;
}
