/*
 * utf8.h - checking that a name is well-formed UTF-8 before it reaches a
 * log line, a metric label or a protocol answer.
 */
#ifndef STRATA_UTF8_H
#define STRATA_UTF8_H

/*
 * Returns the byte offset in the NUL-terminated s of the first byte that
 * starts a sequence that is not well-formed UTF-8 (a stray continuation
 * byte, a truncated sequence, an overlong form, a surrogate, a code point
 * above U+10FFFF), or, when no_controls is set, of the first C0 control
 * character or DEL; -1 when there is none.
 */
long utf8_bad_byte(const char *s, int no_controls);

#endif
