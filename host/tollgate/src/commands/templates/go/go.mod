module example.com/{{name}}

go 1.24

require tollgate.invalid/tollgate v0.0.0

replace tollgate.invalid/tollgate => {{sdk}}/go
