// baton's version: one definition, read by the build (the pkg-config and
// CMake files of `./bazelw run //:install` take it from here) and printed by
// the tools' --version.
//
// Semantic versioning: BATON_VERSION_MAJOR changes when the public API or
// the shared library's ABI breaks (libbaton.so.<major> is the SONAME).
#ifndef BATON_RUNTIME_VERSION_H_
#define BATON_RUNTIME_VERSION_H_

#define BATON_VERSION_MAJOR 0
#define BATON_VERSION_MINOR 1
#define BATON_VERSION_PATCH 0
#define BATON_VERSION "0.1.0"

#endif  // BATON_RUNTIME_VERSION_H_
