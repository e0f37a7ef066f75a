package main

import (
	"bufio"
	"errors"
	"io"
	"strconv"
)

// protocolError is a malformed request: the connection is answered and closed.
type protocolError struct{ msg string }

func (e protocolError) Error() string { return "Protocol error: " + e.msg }

// maxArgs and maxBulk bound one request (Redis's defaults are larger; the
// drivers send a handful of short arguments).
const (
	maxArgs = 1024
	maxBulk = 1 << 20
)

// readCommand reads one RESP array of bulk strings into args (each argument
// its own allocation: the server keeps keys and values).
func readCommand(r *bufio.Reader, args [][]byte) ([][]byte, error) {
	n, err := readHeader(r, '*')
	if err != nil {
		return args, err
	}
	if n < 1 || n > maxArgs {
		return args, protocolError{"invalid multibulk length"}
	}
	for range n {
		size, err := readHeader(r, '$')
		if err != nil {
			return args, err
		}
		if size < 0 || size > maxBulk {
			return args, protocolError{"invalid bulk length"}
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return args, err
		}
		if b[size] != '\r' || b[size+1] != '\n' {
			return args, protocolError{"expected CRLF after a bulk string"}
		}
		args = append(args, b[:size:size])
	}
	return args, nil
}

// readHeader reads a line "<prefix><integer>\r\n".
func readHeader(r *bufio.Reader, prefix byte) (int, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return 0, protocolError{"line too long"}
		}
		return 0, err
	}
	if len(line) < 4 || line[0] != prefix || line[len(line)-2] != '\r' {
		return 0, protocolError{"expected '" + string(prefix) + "'"}
	}
	n, err := strconv.Atoi(string(line[1 : len(line)-2]))
	if err != nil {
		return 0, protocolError{"invalid length"}
	}
	return n, nil
}
