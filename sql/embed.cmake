# SPDX-License-Identifier: MIT
# cmake -DIN=file -DOUT=file.c -DSYMBOL=name -P embed.cmake
# Writes `const char SYMBOL[]` holding IN's bytes plus a NUL, as hex so that no
# character in the SQL needs escaping.
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "((0x..,){16})" "\\1\n\t" body "${body}")
file(WRITE ${OUT}.tmp
  "/* SPDX-License-Identifier: MIT */\n"
  "/* Generated from ${IN} by embed.cmake: do not edit. */\n"
  "const char ${SYMBOL}[] = {\n\t${body}0x00\n};\n")
file(RENAME ${OUT}.tmp ${OUT})
