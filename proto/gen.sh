#!/usr/bin/env bash
# Regenerates the Go code beside the .proto files. Needs protoc and the plugins
# (see `make proto-tools`).
set -euo pipefail
cd "$(dirname "$0")"
GW1=$(go mod download -json github.com/grpc-ecosystem/grpc-gateway@v1.16.0 | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
PATH="$(go env GOPATH)/bin:$PATH"
find . -name '*.pb.go' -o -name '*.pb.gw.go' | xargs -r rm -f
protoc -I . -I "$GW1/third_party/googleapis" \
  --go_out=. --go_opt=paths=source_relative \
  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
  --grpc-gateway_out=. --grpc-gateway_opt=paths=source_relative \
  loom/v1/*.proto loom/training/v1/*.proto
protoc -I . -I "$GW1/third_party/googleapis" \
  --go_out=. --go_opt=paths=source_relative \
  loom/events/v1/*.proto loom/public/v1/*.proto
# TensorBoard's event protos, as TensorBoard ships them (tensorboard/compat/proto,
# Apache-2.0: tensorboard/LICENSE), unchanged: their go_package names
# TensorFlow's repository, so each is mapped onto one Go package of ours.
TB=(event summary histogram tensor resource_handle tensor_shape types)
TBOPTS=()
for f in "${TB[@]}"; do
  TBOPTS+=("--go_opt=Mtensorboard/compat/proto/$f.proto=github.com/loom-ml/loom/proto/tensorboard;tbpb")
done
protoc -I . \
  --go_out=. --go_opt=module=github.com/loom-ml/loom/proto "${TBOPTS[@]}" \
  $(printf 'tensorboard/compat/proto/%s.proto ' "${TB[@]}")
