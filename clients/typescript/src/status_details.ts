/**
 * The field violations of an INVALID_ARGUMENT error, read from its trailers.
 *
 * Cairn's servers attach a `google.rpc.Status` to INVALID_ARGUMENT (trailer
 * `grpc-status-details-bin`) whose details hold a `google.rpc.BadRequest` naming each bad field.
 * Those two messages are small and stable, so they are decoded here by field number rather
 * than by generating google/rpc/*.proto into the package.
 */

import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";

/** One malformed request field, as the server named it (e.g. `block.value`). */
export interface FieldViolation {
  field: string;
  description: string;
}

const STATUS_DETAILS = "grpc-status-details-bin";
const BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest";

/** Calls `onField(fieldNo, reader)` for each field; skips what it does not read. */
function fields(bytes: Uint8Array, onField: (fieldNo: number, reader: BinaryReader) => boolean) {
  const reader = new BinaryReader(bytes);
  while (reader.pos < reader.len) {
    const [fieldNo, wireType] = reader.tag();
    if (wireType !== WireType.LengthDelimited || !onField(fieldNo, reader)) {
      reader.skip(wireType, fieldNo);
    }
  }
}

/** Decodes `google.rpc.BadRequest` field violations from a `google.rpc.Status`. */
export function fieldViolationsOf(status: Uint8Array): FieldViolation[] {
  const violations: FieldViolation[] = [];
  // google.rpc.Status: 3 = repeated google.protobuf.Any details.
  fields(status, (no, reader) => {
    if (no !== 3) return false;
    let typeUrl = "";
    let value: Uint8Array = new Uint8Array();
    // google.protobuf.Any: 1 = type_url, 2 = value.
    fields(reader.bytes(), (anyNo, any) => {
      if (anyNo === 1) typeUrl = any.string();
      else if (anyNo === 2) value = any.bytes();
      else return false;
      return true;
    });
    if (typeUrl !== BAD_REQUEST) return true;
    // google.rpc.BadRequest: 1 = repeated FieldViolation {1 = field, 2 = description}.
    fields(value, (badNo, bad) => {
      if (badNo !== 1) return false;
      const violation: FieldViolation = { field: "", description: "" };
      fields(bad.bytes(), (vNo, v) => {
        if (vNo === 1) violation.field = v.string();
        else if (vNo === 2) violation.description = v.string();
        else return false;
        return true;
      });
      violations.push(violation);
      return true;
    });
    return true;
  });
  return violations;
}

/** The field violations in a call's trailers (`[]` when there are none, or they are garbled). */
export function fieldViolationsFromTrailers(
  get: (key: string) => (string | Buffer)[],
): FieldViolation[] {
  const raw = get(STATUS_DETAILS)[0];
  if (raw === undefined || typeof raw === "string") return [];
  try {
    return fieldViolationsOf(raw);
  } catch {
    return [];
  }
}
