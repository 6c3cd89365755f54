#!/bin/sh
# autogen.sh: generates ./configure from configure.ac (needs autoconf, automake, pkg-config).
set -e
cd "$(dirname "$0")"
autoreconf -fi
