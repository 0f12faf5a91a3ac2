// Package grpcunix makes one unary gRPC call over a unix socket: a new
// connection, HTTP/2 with prior knowledge (as gRPC over a unix socket is),
// one stream, then close. The plugin's kubelet pod-resources client uses it.
//
// It stands in for grpc-go's ClientConn because the plugin binary is
// started for every pod on every CNI verb and pays what it links at each
// start: grpc-go with google.golang.org/protobuf, and a ClientConn with its
// resolver, balancer and transport goroutines, cost more than the one
// request on a local socket (docs/performance.md gives the figures). The
// HPACK is x/net's (the one grpc-go uses) and the socket is package net's;
// only the framing of one unary call is here.
//
// Its scope is frozen: one unary call on stream 1, a request that fits the
// server's initial window, no compression, no streaming, no TLS. A need
// beyond that is a need for grpc-go, in a binary whose start-up does not
// matter. The tests hold it to grpc-go's server, x/net's HPACK and x/net's
// HTTP/2 framer (a differential fuzz of the frame reader).
package grpcunix
