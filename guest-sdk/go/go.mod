module tollgate.invalid/tollgate

go 1.24
