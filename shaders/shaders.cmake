# Every shader variant GRETA builds: greta_add_shader(ID SOURCE [DEFINES ...] [REQUIRES coopmat]).
# IDs become greta::vk::ShaderId enumerators (build/generated/vk/shader_ids.h).
greta_add_shader(fill_u32 fill.comp)
