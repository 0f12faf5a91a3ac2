#!/bin/sh
# upgrade-shared (shared-mode boot, soft-RoCE rxe0 on veth0): the upgrade
# matrix of upgrade.sh in shared mode, an ipvlan child per pod.
. /scenarios/lib.sh
MODE=shared
. /scenarios/upgrade.sh
