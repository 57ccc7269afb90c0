/*
 * test_utf8.c - utf8_bad_byte(): well-formed text passes, and every kind
 * of malformed sequence is found at its first byte.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "utf8.h"
#include "support/unit_main.h"

static void test_utf8_good(void **state)
{
    (void)state;
    assert_int_equal(utf8_bad_byte("", 1), -1);
    assert_int_equal(utf8_bad_byte("acme-llm_v3.2", 1), -1);
    assert_int_equal(utf8_bad_byte("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80", 1),
                     -1);                                       /* é, 日本, 😀 */
    assert_int_equal(utf8_bad_byte("\xf4\x8f\xbf\xbf", 1), -1); /* U+10FFFF */
    assert_int_equal(utf8_bad_byte("a\tb", 0), -1);             /* controls allowed */
}

static void test_utf8_bad(void **state)
{
    (void)state;
    assert_int_equal(utf8_bad_byte("a\tb", 1), 1);                 /* control */
    assert_int_equal(utf8_bad_byte("ab\x7f", 1), 2);               /* DEL */
    assert_int_equal(utf8_bad_byte("x\x80", 0), 1);                /* stray continuation */
    assert_int_equal(utf8_bad_byte("xy\xc3", 0), 2);               /* truncated at the end */
    assert_int_equal(utf8_bad_byte("\xe6\x97z", 0), 0);            /* truncated inside */
    assert_int_equal(utf8_bad_byte("\xc0\xaf", 0), 0);             /* overlong '/' */
    assert_int_equal(utf8_bad_byte("\xe0\x80\xaf", 0), 0);         /* overlong, 3 bytes */
    assert_int_equal(utf8_bad_byte("ok\xed\xa0\x80", 0), 2);       /* surrogate U+D800 */
    assert_int_equal(utf8_bad_byte("\xf4\x90\x80\x80", 0), 0);     /* above U+10FFFF */
    assert_int_equal(utf8_bad_byte("\xf8\x88\x80\x80\x80", 0), 0); /* 5-byte form */
    assert_int_equal(utf8_bad_byte("\xff", 0), 0);
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_utf8_good), cmocka_unit_test(test_utf8_bad));
}
