module github.com/nodesmith/nodesmith/services/lifecycle

go 1.26
