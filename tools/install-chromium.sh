#!/usr/bin/env bash
# Filled in by the issue that needs it.
exit 0
