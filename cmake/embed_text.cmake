# cmake -DIN=FILE -DOUT=FILE.cpp -DSYMBOL=NAME -P embed_text.cmake writes a C++
# source defining `extern const char sluice::server::NAME[]` as FILE's text (a
# raw string literal), so an asset such as the chat page is part of the binary.
file(READ "${IN}" text)
set(delim "sluice_embed")
string(FIND "${text}" ")${delim}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains ')${delim}\"', which would end the raw string literal")
endif()
file(WRITE "${OUT}.tmp" "// Generated from ${IN} by cmake/embed_text.cmake: do not edit.\n"
  "namespace sluice::server {\nextern const char ${SYMBOL}[];\n"
  "const char ${SYMBOL}[] = R\"${delim}(${text})${delim}\";\n}  // namespace sluice::server\n")
file(RENAME "${OUT}.tmp" "${OUT}")
