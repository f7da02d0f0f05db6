package main

import (
	"testing"

	"github.com/spf13/cobra"
)

func TestSASLFlags(t *testing.T) {
	t.Setenv("BATON_DESTINATION_SASL_PASSWORD", "from-env")
	tests := []struct {
		name          string
		args          []string
		wantOpts      int
		wantErr       bool
		wantPrincipal string
	}{
		{name: "none", args: nil},
		{name: "plain", args: []string{"--destination-sasl-mechanism", "PLAIN", "--destination-sasl-user", "r", "--destination-sasl-password", "p"}, wantOpts: 1, wantPrincipal: "User:r"},
		{name: "scram, password from env", args: []string{"--destination-sasl-mechanism", "scram-sha-512", "--destination-sasl-user", "r"}, wantOpts: 1, wantPrincipal: "User:r"},
		{name: "scram-256", args: []string{"--destination-sasl-mechanism", "SCRAM-SHA-256", "--destination-sasl-user", "r"}, wantOpts: 1, wantPrincipal: "User:r"},
		{name: "unknown mechanism", args: []string{"--destination-sasl-mechanism", "GSSAPI", "--destination-sasl-user", "r"}, wantErr: true},
		{name: "user without mechanism", args: []string{"--destination-sasl-user", "r"}, wantErr: true},
		{name: "mechanism without user", args: []string{"--destination-sasl-mechanism", "PLAIN"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s saslFlags
			cmd := &cobra.Command{}
			s.add(cmd.Flags(), "destination")
			if err := cmd.Flags().Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			opts, err := s.opts()
			if (err != nil) != tt.wantErr {
				t.Fatalf("opts: %v, want error %v", err, tt.wantErr)
			}
			if len(opts) != tt.wantOpts {
				t.Errorf("%d options, want %d", len(opts), tt.wantOpts)
			}
			if !tt.wantErr && s.principal() != tt.wantPrincipal {
				t.Errorf("principal %q, want %q", s.principal(), tt.wantPrincipal)
			}
		})
	}
}

func TestSASLFlagsWithoutPassword(t *testing.T) {
	t.Setenv("BATON_SOURCE_SASL_PASSWORD", "")
	var s saslFlags
	cmd := &cobra.Command{}
	s.add(cmd.Flags(), "source")
	if err := cmd.Flags().Parse([]string{"--source-sasl-mechanism", "PLAIN", "--source-sasl-user", "r"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.opts(); err == nil {
		t.Fatal("SASL without a password accepted")
	}
}
