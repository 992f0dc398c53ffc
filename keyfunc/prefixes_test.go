package keyfunc

import (
	"fmt"
	"testing"
)

func TestParsePrefixes(t *testing.T) {
	for _, tc := range []struct {
		in      []string
		want    string
		wantErr bool
	}{
		{in: nil, want: "[]"},
		{in: []string{""}, want: "[]"},
		{in: []string{"10.0.0.0/8"}, want: "[10.0.0.0/8]"},
		{in: []string{"10.0.0.0/8, 192.0.2.10", "2400:cb00::/32\n2001:db8::1"}, want: "[10.0.0.0/8 192.0.2.10/32 2400:cb00::/32 2001:db8::1/128]"},
		{in: []string{"192.168.1.77/24"}, want: "[192.168.1.0/24]"},
		{in: []string{"fe80::1%eth0"}, want: "[fe80::1/128]"},
		{in: []string{" 10.0.0.0/8 ,\t172.16.0.0/12 "}, want: "[10.0.0.0/8 172.16.0.0/12]"},
		{in: []string{"bogus"}, wantErr: true},
		{in: []string{"10.0.0.0/33"}, wantErr: true},
		{in: []string{"0.0.0.0/0"}, wantErr: true},
		{in: []string{"10.0.0.0/8", "::/0"}, wantErr: true},
		{in: []string{"::ffff:0.0.0.0/96"}, wantErr: true}, // every IPv4 address, mapped
		{in: []string{"::ffff:10.0.0.0/104"}, want: "[::ffff:10.0.0.0/104]"},
	} {
		t.Run(fmt.Sprint(tc.in), func(t *testing.T) {
			got, err := ParsePrefixes(tc.in...)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("got %v; want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := fmt.Sprint(got); s != tc.want {
				t.Errorf("got %s; want %s", s, tc.want)
			}
		})
	}
}
