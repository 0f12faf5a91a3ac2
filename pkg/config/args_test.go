package config

import (
	"strings"
	"testing"
)

func TestParseArgs(t *testing.T) {
	cases := []struct {
		name, args string
		want       Pod
		wantErr    bool
	}{
		{"empty", "", Pod{}, false},
		{"full", "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=1f2e-33",
			Pod{Namespace: "default", Name: "web-0", UID: "1f2e-33", InfraContainerID: "abc"}, false},
		// The CNI library's rules (types.LoadArgs): no empty pairs, and an
		// unknown key only with IgnoreUnknown, as every runtime sends it.
		{"trailing semicolon", "K8S_POD_NAMESPACE=a;K8S_POD_NAME=b;", Pod{}, true},
		{"unknown key", "FOO=bar", Pod{}, true},
		{"unknown key ignored", "IgnoreUnknown=1;FOO=bar", Pod{}, false},
		{"no equals", "K8S_POD_NAME", Pod{}, true},
		{"bad key", "K-8=x", Pod{}, true},
		{"path in name", "K8S_POD_NAMESPACE=a;K8S_POD_NAME=../x", Pod{}, true},
		{"upper case name", "K8S_POD_NAMESPACE=a;K8S_POD_NAME=Web", Pod{}, true},
		{"long name", "K8S_POD_NAMESPACE=a;K8S_POD_NAME=" + strings.Repeat("a", 254), Pod{}, true},
		{"bad uid", "K8S_POD_UID=a/b", Pod{}, true},
		{"name without namespace", "K8S_POD_NAME=a", Pod{}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseArgs(tc.args)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err == nil && got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if err != nil {
				assertCode7(t, err, "")
			}
		})
	}
}

func TestSMCRAnnotation(t *testing.T) {
	cases := []struct {
		value   *string
		want    bool
		warning bool
	}{
		{nil, false, false},
		{ptr("true"), true, false},
		{ptr("True"), true, false},
		{ptr("FALSE"), false, false},
		{ptr("yes"), false, true},
		{ptr(""), false, true},
		{ptr("true; rm -rf /"), false, true},
		{ptr(strings.Repeat("x", 5000)), false, true},
	}
	for _, tc := range cases {
		conf := &NetConf{}
		if tc.value != nil {
			conf.RuntimeConfig.PodAnnotations = map[string]string{AnnotationSMCR: *tc.value}
		}
		got, warning := conf.SMCRRequested()
		if got != tc.want || (warning != "") != tc.warning || len(warning) > 200 {
			t.Errorf("value %.20v: got %v warning %q", tc.value, got, warning)
		}
	}
}

func ptr(s string) *string { return &s }
