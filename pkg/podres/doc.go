// Package podres asks kubelet, over its pod-resources gRPC API (v1), which
// devices it allocated to a pod: from device plugins for given extended
// resource names, and from DRA claims (dynamic_resources) for given DRA
// drivers, with the devices of other drivers reported apart. Each call
// is one unary gRPC call on a new connection (internal/grpcunix); the
// messages are encoded by hand from kubelet's api.proto (wire.go) and checked
// against the generated types in the tests. Lookup retries what a busy
// kubelet refuses (retry.go); Probe asks once.
package podres
