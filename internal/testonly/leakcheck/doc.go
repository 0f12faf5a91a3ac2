// Package leakcheck makes a test binary fail when its tests leave the
// machine other than they found it. Main, called from TestMain, takes a
// snapshot before the tests and compares after them: the processes the
// test binary started (it is their subreaper, so a daemon that forked away
// still counts) and, for a binary that changes the host (RC_PRIVILEGED=1 as
// root, or MainHost), the entries of /run/netns, the host netns's links and
// the mounts of /proc/self/mountinfo. What is left after a grace period is
// printed and the binary exits 1.
package leakcheck
