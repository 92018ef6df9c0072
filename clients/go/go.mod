module sqlq.dev/go/sqlq

go 1.19
