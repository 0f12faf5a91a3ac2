// Command fakekubelet serves the kubelet pod-resources API (v1: List, Get)
// on a unix socket, from a JSON file of allocations. It runs inside the test
// VM, in place of a kubelet, so the plugin's "podSelection":"requested" path
// meets a real gRPC server.
//
//	fakekubelet -socket /run/kubelet/pod-resources.sock -allocations pods.json
//
// pods.json:
//
//	{"pods":[{"namespace":"default","name":"p1","resources":{"rdma/hca":["1"]}}]}
package main

import (
	"encoding/json"
	"flag"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/rdma-chain/rdma-chain/internal/testonly/fakekubelet"
)

func main() {
	socket := flag.String("socket", "/run/kubelet/pod-resources.sock", "unix socket to serve on")
	allocFile := flag.String("allocations", "", "JSON file of pod allocations")
	flag.Parse()
	var alloc struct {
		Pods []fakekubelet.Pod `json:"pods"`
	}
	if *allocFile != "" {
		b, err := os.ReadFile(*allocFile)
		if err != nil {
			log.Fatal(err)
		}
		if err := json.Unmarshal(b, &alloc); err != nil {
			log.Fatalf("%s: %v", *allocFile, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(*socket), 0o755); err != nil {
		log.Fatal(err)
	}
	s, err := fakekubelet.Start(*socket, alloc.Pods)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("fakekubelet: serving %d pods on %s", len(alloc.Pods), *socket)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	s.Stop()
}
