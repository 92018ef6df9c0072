# Writes help2man's include file for sqlq(1): packaging/sqlq.h2m (files,
# environment, see also) followed by `sqlq serve --help` as a section of its
# own, so the page lists the server's settings as the program has them.
# cmake -DSQLQ=path/to/sqlq -DIN=packaging/sqlq.h2m -DOUT=... -P this
execute_process(COMMAND ${SQLQ} serve --help OUTPUT_VARIABLE serve_help
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR serve_help STREQUAL "")
  message(FATAL_ERROR "sqlq serve --help failed (${rc})")
endif()
# roff: a backslash is \e; a line starting with . or ' would be a request.
string(REPLACE "\\" "\\e" serve_help "${serve_help}")
string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" serve_help "${serve_help}")
file(READ ${IN} text)
file(WRITE ${OUT} "${text}\n[SERVER]\nsqlq serve runs the HTTP server; its settings are flags, environment variables or keys of the config file:\n.PP\n.nf\n${serve_help}.fi\n")
