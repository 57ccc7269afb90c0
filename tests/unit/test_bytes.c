/*
 * test_bytes.c - common/bytes.h and common/clock.h: the byte order of every
 * load and store, unaligned access, and clocks and deadlines that move forward.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "bytes.h"
#include "clock.h"
#include "support/unit_main.h"

static void test_bytes_order(void **state)
{
    uint8_t b[9] = {0};

    (void)state;
    cm_put_le16(b + 1, 0x0201);
    assert_int_equal(b[1], 1);
    assert_int_equal(b[2], 2);
    cm_put_le32(b + 1, 0x04030201u);
    assert_memory_equal(b + 1, "\x01\x02\x03\x04", 4);
    assert_int_equal(cm_get_le32(b + 1), 0x04030201u);
    cm_put_le64(b + 1, 0x0807060504030201ull);
    assert_memory_equal(b + 1, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
    assert_true(cm_get_le64(b + 1) == 0x0807060504030201ull);
    cm_put_be64(b + 1, 0x0807060504030201ull);
    assert_memory_equal(b + 1, "\x08\x07\x06\x05\x04\x03\x02\x01", 8);
    assert_true(cm_get_be64(b + 1) == 0x0807060504030201ull);
    assert_int_equal(b[0], 0); /* nothing written outside */
}

static void test_clock(void **state)
{
    uint64_t ns = cm_mono_ns(), us = cm_mono_us(), ms = cm_mono_ms();
    struct timespec now, d;

    (void)state;
    assert_true(us >= ns / 1000u && ms >= ns / 1000000u);
    assert_true(cm_mono_ns() >= ns);
    assert_true(cm_real_ms() > 1700000000000ull); /* after 2023 */
    assert_true(cm_real_us() / 1000u >= cm_real_ms() - 1);
    clock_gettime(CLOCK_REALTIME, &now);
    d = cm_deadline_us(1500000u);
    assert_true(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
    assert_true(d.tv_sec >= now.tv_sec + 1 && d.tv_sec <= now.tv_sec + 2);
    d = cm_deadline_ms(999);
    assert_true(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
    assert_true(d.tv_sec >= now.tv_sec && d.tv_sec <= now.tv_sec + 1);
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_bytes_order), cmocka_unit_test(test_clock));
}
