"""baton's version for the build (SONAME, baton.pc, batonConfigVersion.cmake).

Must equal BATON_VERSION in runtime/version.h; //runtime:version_test checks
that they agree.
"""

BATON_VERSION = "0.1.0"
BATON_SOVERSION = BATON_VERSION.split(".")[0]
