package main

import "runtime/debug"

// riverVersion is the River module version this binary was built with.
func riverVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/riverqueue/river" {
				return dep.Version
			}
		}
	}
	return "unknown"
}
