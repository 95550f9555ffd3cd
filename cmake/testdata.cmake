# Sample conversations generated at build time, for the tests and the benches: the project's
# own generator (tests/support/gen_conversations.py, Python 3 standard library) with a fixed
# seed writes CG_TESTDATA_COUNT OpenAI-format conversations (3 to ~280 messages, up to
# ~760 KB, seven languages, planted facts) into CG_TESTDATA_CONVERSATIONS, rewritten when the
# generator changes. Targets that read them depend on cg_testdata and get the directory as
# the compile definition CG_TESTDATA_CONVERSATIONS.
find_program(CG_PYTHON3 python3 REQUIRED)
set(CG_TESTDATA_SEED 1)
set(CG_TESTDATA_COUNT 24) # the tests expect at least 20
set(CG_TESTDATA_CONVERSATIONS ${CMAKE_BINARY_DIR}/testdata/conversations)
# Inside the directory: removing the directory makes the next build write it again.
set(CG_TESTDATA_STAMP ${CG_TESTDATA_CONVERSATIONS}/.generated)
add_custom_command(
  OUTPUT ${CG_TESTDATA_STAMP}
  COMMAND ${CG_PYTHON3} ${CMAKE_SOURCE_DIR}/tests/support/gen_conversations.py
          --seed ${CG_TESTDATA_SEED} --count ${CG_TESTDATA_COUNT} ${CG_TESTDATA_CONVERSATIONS}
  COMMAND ${CMAKE_COMMAND} -E touch ${CG_TESTDATA_STAMP}
  DEPENDS ${CMAKE_SOURCE_DIR}/tests/support/gen_conversations.py
          ${CMAKE_SOURCE_DIR}/tests/support/textgen.py
  COMMENT "generating ${CG_TESTDATA_COUNT} test conversations (seed ${CG_TESTDATA_SEED})" VERBATIM)
add_custom_target(cg_testdata DEPENDS ${CG_TESTDATA_STAMP})

# Makes target read the generated conversations (CG_TESTDATA_CONVERSATIONS, a string).
function(cg_uses_testdata target)
  add_dependencies(${target} cg_testdata)
  target_compile_definitions(${target} PRIVATE
    CG_TESTDATA_CONVERSATIONS="${CG_TESTDATA_CONVERSATIONS}")
endfunction()
