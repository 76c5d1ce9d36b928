#include "vk/spirv_reflect.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"

namespace greta::vk {

namespace {

// Opcodes, decorations, storage classes and execution modes from the SPIR-V specification (unified headers).
enum Op : uint32_t {
  OpExecutionMode = 16,
  OpCapability = 17,
  OpTypeBool = 20,
  OpTypeInt = 21,
  OpTypeFloat = 22,
  OpTypeVector = 23,
  OpTypeMatrix = 24,
  OpTypeArray = 28,
  OpTypeRuntimeArray = 29,
  OpTypeStruct = 30,
  OpTypePointer = 32,
  OpConstant = 43,
  OpConstantComposite = 44,
  OpSpecConstantTrue = 48,
  OpSpecConstantFalse = 49,
  OpSpecConstant = 50,
  OpSpecConstantComposite = 51,
  OpVariable = 59,
  OpDecorate = 71,
  OpMemberDecorate = 72,
  OpExecutionModeId = 331,
};
enum Decoration : uint32_t {
  DecSpecId = 1,
  DecBlock = 2,
  DecBufferBlock = 3,
  DecArrayStride = 6,
  DecMatrixStride = 7,
  DecBuiltIn = 11,
  DecBinding = 33,
  DecDescriptorSet = 34,
  DecOffset = 35,
};
constexpr uint32_t k_builtin_workgroup_size = 25;
constexpr uint32_t k_mode_local_size = 17;
constexpr uint32_t k_mode_local_size_id = 38;
enum StorageClass : uint32_t { ScUniformConstant = 0, ScUniform = 2, ScPushConstant = 9, ScStorageBuffer = 12 };

struct Type {
  uint32_t opcode = 0;
  std::vector<uint32_t> operands;  // the instruction's words after the result id
};

struct Parsed {
  std::map<uint32_t, Type> types;
  std::map<uint32_t, uint32_t> constants;  // id -> first value word (32-bit scalars)
  std::map<uint32_t, std::vector<uint32_t>> composites;  // id -> constituent ids
  std::map<uint32_t, std::map<uint32_t, uint32_t>> decorations;  // id -> decoration -> first operand
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> member_offsets;  // (struct, member) -> Offset
  struct Variable {
    uint32_t id, pointer_type, storage_class;
  };
  std::vector<Variable> variables;
};

uint64_t type_size(const Parsed& p, uint32_t id, int depth = 0);

uint64_t struct_size(const Parsed& p, uint32_t id, const Type& t, int depth) {
  uint64_t size = 0;
  for (uint32_t m = 0; m < t.operands.size(); ++m) {
    auto it = p.member_offsets.find({id, m});
    const uint64_t offset = it == p.member_offsets.end() ? size : it->second;
    size = std::max(size, offset + type_size(p, t.operands[m], depth + 1));
  }
  return size;
}

// Byte size of a type as laid out in a push-constant or buffer block (explicit offsets and strides).
uint64_t type_size(const Parsed& p, uint32_t id, int depth) {
  if (depth > 16) fail("SPIR-V type nesting too deep");
  auto it = p.types.find(id);
  if (it == p.types.end()) fail("SPIR-V refers to an unknown type %", id);
  const Type& t = it->second;
  auto operand = [&](size_t i) {
    if (i >= t.operands.size()) fail("malformed SPIR-V type %", id);
    return t.operands[i];
  };
  switch (t.opcode) {
    case OpTypeBool: return 4;
    case OpTypeInt:
    case OpTypeFloat: return operand(0) / 8;
    case OpTypeVector: return type_size(p, operand(0), depth + 1) * operand(1);
    case OpTypeMatrix: return type_size(p, operand(0), depth + 1) * operand(1);  // column-major, no padding
    case OpTypeArray: {
      auto len = p.constants.find(operand(1));
      if (len == p.constants.end()) fail("SPIR-V array %", id, " has a non-constant length");
      uint64_t stride = type_size(p, operand(0), depth + 1);
      auto d = p.decorations.find(id);
      if (d != p.decorations.end() && d->second.count(DecArrayStride)) stride = d->second.at(DecArrayStride);
      return stride * len->second;
    }
    case OpTypeRuntimeArray: return 0;
    case OpTypeStruct: return struct_size(p, id, t, depth);
    default: fail("SPIR-V type %", id, " (opcode ", t.opcode, ") has no size here");
  }
}

}  // namespace

bool ShaderReflection::has_capability(uint32_t capability) const {
  return std::find(capabilities.begin(), capabilities.end(), capability) != capabilities.end();
}

bool ShaderReflection::has_spec_id(uint32_t id) const {
  return std::binary_search(spec_ids.begin(), spec_ids.end(), id);
}

ShaderReflection reflect_spirv(const uint32_t* words, size_t word_count) {
  if (!words || word_count < 5 || words[0] != 0x07230203u) fail("not a SPIR-V module (bad magic number)");
  Parsed p;
  ShaderReflection r;
  std::array<uint32_t, 3> mode_size{1, 1, 1};
  std::array<uint32_t, 3> mode_size_ids{0, 0, 0};
  bool have_mode_size_ids = false;

  for (size_t pos = 5; pos < word_count;) {
    const uint32_t count = words[pos] >> 16;
    const uint32_t opcode = words[pos] & 0xffffu;
    if (count == 0 || pos + count > word_count) fail("malformed SPIR-V: instruction at word ", pos, " overruns");
    const uint32_t* w = words + pos;
    auto need = [&](uint32_t n) {
      if (count < n) fail("malformed SPIR-V: opcode ", opcode, " at word ", pos, " is too short");
    };
    switch (opcode) {
      case OpCapability: need(2); r.capabilities.push_back(w[1]); break;
      case OpExecutionMode:
        need(3);
        if (w[2] == k_mode_local_size) {
          need(6);
          mode_size = {w[3], w[4], w[5]};
        }
        break;
      case OpExecutionModeId:
        need(3);
        if (w[2] == k_mode_local_size_id) {
          need(6);
          mode_size_ids = {w[3], w[4], w[5]};
          have_mode_size_ids = true;
        }
        break;
      case OpTypeBool: case OpTypeInt: case OpTypeFloat: case OpTypeVector: case OpTypeMatrix: case OpTypeArray:
      case OpTypeRuntimeArray: case OpTypeStruct: case OpTypePointer:
        need(2);
        p.types[w[1]] = Type{opcode, std::vector<uint32_t>(w + 2, w + count)};
        break;
      case OpConstant: case OpSpecConstant:
        need(4);
        p.constants[w[2]] = w[3];
        break;
      case OpSpecConstantTrue: need(3); p.constants[w[2]] = 1; break;
      case OpSpecConstantFalse: need(3); p.constants[w[2]] = 0; break;
      case OpConstantComposite: case OpSpecConstantComposite:
        need(3);
        p.composites[w[2]] = std::vector<uint32_t>(w + 3, w + count);
        break;
      case OpVariable: need(4); p.variables.push_back({w[2], w[1], w[3]}); break;
      case OpDecorate:
        need(3);
        p.decorations[w[1]][w[2]] = count > 3 ? w[3] : 0;
        break;
      case OpMemberDecorate:
        need(4);
        if (w[3] == DecOffset) {
          need(5);
          p.member_offsets[{w[1], w[2]}] = w[4];
        }
        break;
      default: break;
    }
    pos += count;
  }

  // Specialization constants and the workgroup size.
  std::set<uint32_t> spec_ids;
  auto spec_id_of = [&](uint32_t id) -> int32_t {
    auto d = p.decorations.find(id);
    if (d == p.decorations.end() || !d->second.count(DecSpecId)) return -1;
    return int32_t(d->second.at(DecSpecId));
  };
  for (const auto& [id, decs] : p.decorations)
    if (decs.count(DecSpecId)) spec_ids.insert(decs.at(DecSpecId));
  r.spec_ids.assign(spec_ids.begin(), spec_ids.end());
  r.local_size = mode_size;
  auto set_from_ids = [&](const std::vector<uint32_t>& ids) {
    for (size_t i = 0; i < 3 && i < ids.size(); ++i) {
      auto c = p.constants.find(ids[i]);
      if (c == p.constants.end()) fail("SPIR-V workgroup size component %", ids[i], " is not a scalar constant");
      r.local_size[i] = c->second;
      r.local_size_spec_id[i] = spec_id_of(ids[i]);
    }
  };
  if (have_mode_size_ids) set_from_ids({mode_size_ids.begin(), mode_size_ids.end()});
  for (const auto& [id, decs] : p.decorations) {  // a WorkgroupSize built-in overrides the execution mode
    auto b = decs.find(DecBuiltIn);
    if (b != decs.end() && b->second == k_builtin_workgroup_size && p.composites.count(id))
      set_from_ids(p.composites.at(id));
  }

  // Descriptor bindings and the push-constant block.
  std::set<uint32_t> bindings;
  for (const auto& v : p.variables) {
    auto ptr = p.types.find(v.pointer_type);
    if (ptr == p.types.end() || ptr->second.opcode != OpTypePointer || ptr->second.operands.size() < 2)
      fail("malformed SPIR-V: variable %", v.id, " has no pointer type");
    const uint32_t pointee = ptr->second.operands[1];
    if (v.storage_class == ScPushConstant) {
      r.push_constant_bytes = uint32_t(type_size(p, pointee));
      continue;
    }
    auto d = p.decorations.find(v.id);
    const bool has_binding = d != p.decorations.end() && d->second.count(DecBinding);
    if (!has_binding) continue;
    const uint32_t set = d->second.count(DecDescriptorSet) ? d->second.at(DecDescriptorSet) : 0;
    const uint32_t binding = d->second.at(DecBinding);
    if (set != 0) fail("shader uses descriptor set ", set, "; GRETA pipelines use set 0 only");
    bool storage = v.storage_class == ScStorageBuffer;
    if (v.storage_class == ScUniform) {  // pre-1.3 SPIR-V marks storage buffers as Uniform + BufferBlock
      auto sd = p.decorations.find(pointee);
      storage = sd != p.decorations.end() && sd->second.count(DecBufferBlock);
    }
    if (!storage) fail("shader binding ", binding, " is not a storage buffer; GRETA pipelines bind storage buffers only");
    bindings.insert(binding);  // several views of one buffer (e.g. uint[] and uvec4[]) share a binding
  }
  r.binding_count = uint32_t(bindings.size());
  if (!bindings.empty() && *bindings.rbegin() != r.binding_count - 1)
    fail("shader bindings are not numbered 0..", r.binding_count - 1, " without gaps");
  return r;
}

}  // namespace greta::vk
