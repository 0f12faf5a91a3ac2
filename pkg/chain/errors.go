package chain

import (
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
)

// CNI error codes of the plugin's own (100+), documented in docs/configuration.md.
const (
	CodeNoRDMA          uint = 100 // the pod needs RDMA; this kernel has none
	CodeModeMismatch    uint = 101 // configured mode differs from the kernel's
	CodeMoveUnsupported uint = 102 // the RDMA device's driver cannot change netns
	CodeNoDevice        uint = 103 // no offered RDMA device matches the pod's request
	CodeLinkSetup       uint = 104 // moving, restoring or creating a netdev failed
	CodeState           uint = 105 // the attachment state store failed or conflicts
	CodeCheckFailed     uint = 106 // CHECK found the attachment differs from its record
	CodeIPAM            uint = 107 // the delegated IPAM plugin failed
	CodeSMC             uint = 108 // SMC-R set-up failed, or SMC is missing with onUnsupported: fail
	CodePodIPv6         uint = 109 // podIPv6Block: the netdev has no global /64, or the block is exhausted
	CodeNodeUplink      uint = 110 // exclusive mode: the netdev carries the node's default route or address
	CodeGIDTableFull    uint = 111 // shared mode: the RDMA port's GID table has no room for the pod's address
	CodeSoftRoCE        uint = 112 // podSoftRoCE: the node cannot give the pod an rxe device of its own
	CodeClaimConfig     uint = 113 // a DRA claim's configuration cannot be read, or is refused
	// CodeNotAvailable is the spec's STATUS code: the plugin cannot serve ADD.
	CodeNotAvailable uint = 50
)

// cniError turns err into the error the runtime sees. An err that already is
// a *types.Error keeps its code.
func cniError(code uint, msg string, err error) error {
	var te *types.Error
	if errors.As(err, &te) {
		return te
	}
	details := ""
	if err != nil {
		details = err.Error()
	}
	return types.NewError(code, msg, details)
}

func cniErrorf(code uint, format string, args ...any) error {
	return types.NewError(code, fmt.Sprintf(format, args...), "")
}

// Codes lists every CNI error code the plugin returns, its own and the CNI
// library's; the error table of docs/configuration.md lists exactly these (a test checks
// both the table and the code that returns them).
var Codes = []uint{
	types.ErrIncompatibleCNIVersion, types.ErrInvalidEnvironmentVariables, types.ErrIOFailure, types.ErrDecodingFailure, types.ErrInvalidNetworkConfig,
	types.ErrInvalidNetNS, types.ErrTryAgainLater, CodeNotAvailable,
	CodeNoRDMA, CodeModeMismatch, CodeMoveUnsupported, CodeNoDevice, CodeLinkSetup,
	CodeState, CodeCheckFailed, CodeIPAM, CodeSMC, CodePodIPv6, CodeNodeUplink, CodeGIDTableFull, CodeSoftRoCE,
	CodeClaimConfig,
}
