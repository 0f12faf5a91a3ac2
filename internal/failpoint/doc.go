// Package failpoint marks the steps of the plugin that change the host, so
// the crash tests can kill the process right after each of them.
//
// In a normal build Hit is an empty function the compiler removes. Built
// with -tags failpoint (tests only, never shipped), Hit does two things,
// driven by the environment:
//
//	RDMA_CHAIN_FAILPOINT=NAME        SIGKILL the process when step NAME is hit
//	RDMA_CHAIN_FAILPOINT_TRACE=FILE  append every name hit to FILE, one a line
//
// The crash tests run a scenario once with TRACE to learn which failpoints it
// reaches, then once per failpoint with RDMA_CHAIN_FAILPOINT set, then check
// that the following DEL (or GC) leaves the node exactly as it found it.
package failpoint
