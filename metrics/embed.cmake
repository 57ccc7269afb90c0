# Turns a text file into a C source that defines a NUL-terminated char array
# and its length. Run at build time:
#   cmake -DINPUT=<file> -DOUTPUT=<file.c> -DSYMBOL=<name> -P embed.cmake
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hexlen)
math(EXPR len "${hexlen} / 2")
# One "0xNN," per byte, sixteen to a line.
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n    " bytes "${bytes}")
get_filename_component(name "${INPUT}" NAME)
file(WRITE "${OUTPUT}.tmp"
     "/* Generated from ${name} by metrics/embed.cmake; do not edit. */\n"
     "#include <stddef.h>\n\n"
     "extern const char ${SYMBOL}[];\n"
     "extern const size_t ${SYMBOL}_len;\n\n"
     "const char ${SYMBOL}[] = {\n    ${bytes}0x00};\n"
     "const size_t ${SYMBOL}_len = ${len};\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
