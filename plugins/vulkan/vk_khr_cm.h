/* plugins/vulkan/vk_khr_cm.h — VK_KHR_cooperative_matrix (Vulkan 1.3.255) is newer than Debian 12's headers
 * (1.3.239): its name, structure types and structures as the registry gives them. Used by the plugin (vk_caps.c, the
 * feature chained into vkCreateDevice) and by scripts/vk_cm_probe.c. Needs <vulkan/vulkan.h> first. */
#ifndef PYGGML_VK_KHR_CM_H
#define PYGGML_VK_KHR_CM_H

#define VKP_KHR_CM_EXT "VK_KHR_cooperative_matrix"
#define VKP_STYPE_CM_KHR_FEATURES ((VkStructureType)1000506000)
#define VKP_STYPE_CM_KHR_PROPERTIES ((VkStructureType)1000506001)
/* VkPhysicalDeviceCooperativeMatrixFeaturesKHR */
struct vkp_cm_khr_features { VkStructureType sType; void *pNext; VkBool32 cooperativeMatrix, cooperativeMatrixRobustBufferAccess; };
/* VkCooperativeMatrixPropertiesKHR (the component types and scope have the NV extension's values) */
typedef struct { VkStructureType sType; void *pNext; uint32_t MSize, NSize, KSize; VkComponentTypeNV AType, BType, CType, ResultType;
                 VkBool32 saturatingAccumulation; VkScopeNV scope; } vkp_cm_khr_props;
/* vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR */
typedef VkResult (VKAPI_PTR *vkp_cm_khr_props_fn)(VkPhysicalDevice, uint32_t *, vkp_cm_khr_props *);

#endif
