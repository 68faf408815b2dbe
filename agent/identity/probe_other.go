//go:build !linux && !darwin

package identity

import (
	"errors"
	"os"
)

func probeHost() (hostInfo, error) {
	name, err := os.Hostname()
	if err != nil {
		return hostInfo{}, errors.New("no host probe for this OS")
	}
	return hostInfo{FriendlyName: name}, nil
}
