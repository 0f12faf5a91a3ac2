#!/bin/sh
# soak-shared (own boot, soft-RoCE rxe0): soak.sh in shared mode.
. /scenarios/lib.sh
MODE=shared
. /scenarios/soak.sh
