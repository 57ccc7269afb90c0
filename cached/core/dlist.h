/*
 * dlist.h - the storage core's intrusive doubly-linked lists (in the manner
 * of BSD's sys/queue.h): a record carries its own prev and next fields, a
 * list is a head (and, for a queue, a tail) kept by its owner. The macros
 * take the fields' names, so one record can sit on several lists.
 *
 * A list has a head only (an object's block, sessions, partial pages); a
 * queue has a head and a tail (reservations, leases, pins, the radix LRU).
 * Arguments are evaluated more than once: pass plain lvalues.
 */
#ifndef STRATA_CACHED_DLIST_H
#define STRATA_CACHED_DLIST_H

#include <stddef.h>

/* Puts node at the head of the list at head. */
#define CD_LIST_PUSH(head, node, prev, next) \
    do {                                     \
        (node)->prev = NULL;                 \
        (node)->next = (head);               \
        if ((head) != NULL) {                \
            (head)->prev = (node);           \
        }                                    \
        (head) = (node);                     \
    } while (0)

/* Takes node out of the list at head (its own fields are left as they were). */
#define CD_LIST_REMOVE(head, node, prev, next) \
    do {                                       \
        if ((node)->prev != NULL) {            \
            (node)->prev->next = (node)->next; \
        } else {                               \
            (head) = (node)->next;             \
        }                                      \
        if ((node)->next != NULL) {            \
            (node)->next->prev = (node)->prev; \
        }                                      \
    } while (0)

/* Takes node out of the queue (head, tail); its own fields are left. */
#define CD_QUEUE_REMOVE(head, tail, node, prev, next) \
    do {                                              \
        if ((node)->next == NULL) {                   \
            (tail) = (node)->prev;                    \
        }                                             \
        CD_LIST_REMOVE(head, node, prev, next);       \
    } while (0)

/* Puts node into the queue (head, tail) after the record after (NULL: at
 * the head). */
#define CD_QUEUE_INSERT_AFTER(head, tail, after, node, prev, next)   \
    do {                                                             \
        __typeof__(node) cd_after_ = (after);                        \
                                                                     \
        (node)->prev = cd_after_;                                    \
        (node)->next = cd_after_ != NULL ? cd_after_->next : (head); \
        if ((node)->next != NULL) {                                  \
            (node)->next->prev = (node);                             \
        } else {                                                     \
            (tail) = (node);                                         \
        }                                                            \
        if (cd_after_ != NULL) {                                     \
            cd_after_->next = (node);                                \
        } else {                                                     \
            (head) = (node);                                         \
        }                                                            \
    } while (0)

/* Puts node at the tail, or at the head, of the queue (head, tail). */
#define CD_QUEUE_PUSH_TAIL(head, tail, node, prev, next) \
    CD_QUEUE_INSERT_AFTER(head, tail, tail, node, prev, next)
#define CD_QUEUE_PUSH_HEAD(head, tail, node, prev, next) \
    CD_QUEUE_INSERT_AFTER(head, tail, NULL, node, prev, next)

/*
 * Files node into the queue (head, tail) kept in ascending order of the
 * field key, after every record whose key is not greater: found by walking
 * back from the tail, which is O(1) when most records share one duration.
 */
#define CD_QUEUE_INSERT_SORTED(head, tail, node, prev, next, key)    \
    do {                                                             \
        __typeof__(node) cd_at_ = (tail);                            \
                                                                     \
        while (cd_at_ != NULL && cd_at_->key > (node)->key) {        \
            cd_at_ = cd_at_->prev;                                   \
        }                                                            \
        CD_QUEUE_INSERT_AFTER(head, tail, cd_at_, node, prev, next); \
    } while (0)

#endif /* STRATA_CACHED_DLIST_H */
