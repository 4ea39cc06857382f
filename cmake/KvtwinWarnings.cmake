# Project code builds warning-free with -Wall -Wextra and warnings as errors.
# Sanitizers apply to CPU targets only (nvcc's host pass does not take them).
function(kvtwin_project_target target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -ffp-contract=off>
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror,-ffp-contract=off>)
  if(KVTWIN_SANITIZE)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all>)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
    # Tests that only repeat work the default build already ran may do less of it (ASan is ~10x slower).
    target_compile_definitions(${target} PRIVATE KVTWIN_SANITIZED=1)
  endif()
endfunction()
