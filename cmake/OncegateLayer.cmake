# oncegate_layer(<name> SOURCES <files>... DEPENDS <targets>...
#                [PRIVATE <targets>...])
#
# One source folder is one layer: a static library `oncegate::<name>` over
# the folder's sources. DEPENDS are the layers (and packages) it builds on,
# in the one direction the top-level CMakeLists.txt lists the folders;
# PRIVATE are packages only its sources use.
function(oncegate_layer name)
  cmake_parse_arguments(arg "" "" "SOURCES;DEPENDS;PRIVATE" ${ARGN})
  add_library(oncegate_${name} ${arg_SOURCES})
  add_library(oncegate::${name} ALIAS oncegate_${name})
  target_link_libraries(oncegate_${name}
    PUBLIC ${arg_DEPENDS}
    PRIVATE ${arg_PRIVATE})
endfunction()
