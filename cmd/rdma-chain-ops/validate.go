package main

import (
	"github.com/rdma-chain/rdma-chain/internal/say"
	"github.com/rdma-chain/rdma-chain/pkg/validate"
)

func runValidate(o IO, args []string) int {
	fs := newFlags(o, "validate")
	binDir := fs.String("cni-bin-dir", "", "check that the entry's ipam.type exists in this CNI bin dir")
	files, code, ok := parseFlags(o, fs, args)
	if !ok {
		return code
	}
	if len(files) == 0 {
		return usageError(fs, "no FILE given")
	}
	bad := 0
	for _, name := range files {
		data, err := validate.ReadFile(name)
		if err != nil {
			say.Printf(o.Stdout, "%s: %v\n", name, err)
			bad++
			continue
		}
		probs := validate.Conflist(data, *binDir)
		for _, line := range validate.FormatAll(name, data, probs) {
			say.Println(o.Stdout, line)
		}
		for _, n := range validate.OrderNotes(data) {
			say.Printf(o.Stdout, "%s: note: %s\n", name, n)
		}
		bad += len(probs)
	}
	if bad > 0 {
		return ExitProblems
	}
	return ExitOK
}
