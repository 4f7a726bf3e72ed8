/* Rucx implements the ucp API of UCX 1.19. */
#ifndef RUCX_UCP_VERSION_H
#define RUCX_UCP_VERSION_H

#define UCP_VERSION_MAJOR_SHIFT 24
#define UCP_VERSION_MINOR_SHIFT 16
#define UCP_VERSION(_major, _minor) \
    (((_major) << UCP_VERSION_MAJOR_SHIFT) | ((_minor) << UCP_VERSION_MINOR_SHIFT))

#define UCP_API_MAJOR   1
#define UCP_API_MINOR   19
#define UCP_API_VERSION UCP_VERSION(1, 19)

#endif
