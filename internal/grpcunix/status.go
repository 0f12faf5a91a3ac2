package grpcunix

import (
	"errors"
	"fmt"
	"strconv"
)

// Code is a gRPC status code (the numbers are the protocol's).
type Code uint32

// The gRPC status codes.
const (
	OK Code = iota
	Canceled
	Unknown
	InvalidArgument
	DeadlineExceeded
	NotFound
	AlreadyExists
	PermissionDenied
	ResourceExhausted
	FailedPrecondition
	Aborted
	OutOfRange
	Unimplemented
	Internal
	Unavailable
	DataLoss
	Unauthenticated
)

var codeNames = [...]string{"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
	"AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange",
	"Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated"}

func (code Code) String() string {
	if int(code) < len(codeNames) {
		return codeNames[code]
	}
	return "Code(" + strconv.FormatUint(uint64(code), 10) + ")"
}

// Status is a failed call: the server's status, or the client's reading of
// a transport failure. Err is the underlying error, if any. Server tells a
// code the server sent (grpc-status, a stream reset) from the client's own
// (a reply over the caller's limit is ResourceExhausted too): a caller that
// retries what the server refused must not retry what it refuses itself.
type Status struct {
	Code    Code
	Message string
	Err     error
	Server  bool
}

func (s *Status) Error() string {
	return fmt.Sprintf("rpc error: code = %s desc = %s", s.Code, s.Message)
}

func (s *Status) Unwrap() error { return s.Err }

// StatusOf returns err's status: OK for nil, Unknown for an error that
// carries none.
func StatusOf(err error) *Status {
	if err == nil {
		return &Status{Code: OK}
	}
	var st *Status
	if errors.As(err, &st) {
		return st
	}
	return &Status{Code: Unknown, Message: err.Error(), Err: err}
}

// protocolError is a reply that breaks HTTP/2 or gRPC framing.
func protocolError(format string, args ...any) *Status {
	return &Status{Code: Internal, Message: "protocol error: " + fmt.Sprintf(format, args...)}
}
