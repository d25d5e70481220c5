package main

import (
	"maps"
	"testing"
)

func TestDeletionPlan(t *testing.T) {
	r := &run{cfg: config{scaleDown: 150, ecsScaleDown: 30}}
	views := func(a, b, g int) map[string]groupView {
		return map[string]groupView{"alpha": {running: a}, "beta": {running: b}, "gamma": {running: g}, ecsGroup: {running: 50}}
	}
	tests := []struct {
		name    string
		views   map[string]groupView
		want    map[string]int
		wantErr bool
	}{
		{"even split", views(90, 80, 100), map[string]int{"alpha": 75, "beta": 75, "gamma": 0, ecsGroup: 30}, false},
		{"beta short", views(90, 73, 100), map[string]int{"alpha": 77, "beta": 73, "gamma": 0, ecsGroup: 30}, false},
		{"alpha short", views(70, 80, 100), map[string]int{"alpha": 70, "beta": 80, "gamma": 0, ecsGroup: 30}, false},
		{"both short", views(70, 70, 100), map[string]int{"alpha": 70, "beta": 70, "gamma": 10, ecsGroup: 30}, false},
		{"not enough anywhere", views(50, 50, 40), nil, true},
		{"ecs short", map[string]groupView{"alpha": {running: 90}, "beta": {running: 80}, "gamma": {running: 100}, ecsGroup: {running: 20}},
			map[string]int{"alpha": 75, "beta": 75, "gamma": 0, ecsGroup: 20}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.deletionPlan(tt.views)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && !maps.Equal(got, tt.want) {
				t.Errorf("plan = %v, want %v", got, tt.want)
			}
		})
	}
}
