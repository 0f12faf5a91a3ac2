package config

import "testing"

// BenchmarkParse parses a Terway-style entry at 0.4.0 with a
// one-interface prevResult, as every pod's ADD parses it.
func BenchmarkParse(b *testing.B) {
	stdin := []byte(prevAt("0.4.0", `{"interfaces":[`+eth0+`],"ips":[{"version":"4","interface":0,"address":"10.1.0.5/16","gateway":"10.1.0.1"}],"routes":[{"dst":"0.0.0.0/0"}],"dns":{}}`))
	for b.Loop() {
		if _, _, err := Parse(stdin); err != nil {
			b.Fatal(err)
		}
	}
}
