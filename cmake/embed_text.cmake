# Writes OUT, a C++ source defining `const std::string_view NAME` (in
# namespace sqlq::server) with the text of IN: a file of the repository
# compiled into the binary as it is, with no build step of its own.
# Usage: cmake -DIN=file -DOUT=file.cc -DNAME=kName -P embed_text.cmake
file(READ "${IN}" text)
set(delimiter "sqlq_embedded")
string(FIND "${text}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw string's end marker")
endif()
file(WRITE "${OUT}.tmp"
  "// Generated from ${IN} by cmake/embed_text.cmake: do not edit.\n"
  "#include <string_view>\n"
  "namespace sqlq::server {\n"
  "extern const std::string_view ${NAME};\n"
  "const std::string_view ${NAME} = R\"${delimiter}(${text})${delimiter}\";\n"
  "}  // namespace sqlq::server\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
